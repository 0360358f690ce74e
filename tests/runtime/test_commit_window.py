"""A worker killed between a group's execution and its commit: every task still ends once.

The runner acknowledges an outcome only when its group is committed. A worker process is
killed (SIGKILL) while a group of finished tasks waits for its commit (the store holds the
commit open: tests/runtime/commit_window_worker.py); the sweeper gives the orphaned tasks
back after their lease, a second worker runs them. Every task ends SUCCESS exactly once in
the store; the side effects of the uncommitted group happen twice (at least once, as the
operations page of the docs says, under Reliability), and of no other task.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from taskfuse.core.scheduler import Scheduler, SchedulerConfig
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App
from taskfuse.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
TASKS = 40
WAIT_S = 60


def _worker(db: Path, effects: Path, ok_groups: int, worker_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.commit_window_worker", str(db), str(effects),
         str(ok_groups), worker_id],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_worker_killed_before_its_commit_leaves_every_task_ending_once(tmp_path) -> None:
    db, effects = tmp_path / "tasks.db", tmp_path / "effects"
    effects.touch()
    app = App("window")
    app.task("effect", timeout=30, max_retry=3)(lambda ctx, payload: None)
    with SQLiteStore(db) as store:
        Scheduler(store).submit_many([app.spec("effect") for _ in range(TASKS)], time.time())

    first = _worker(db, effects, ok_groups=2, worker_id="first")
    assert first.stdout is not None
    line = first.stdout.readline().split()  # it says when a commit is being held
    assert line and line[0] == "stalled", line
    held = int(line[1])
    first.send_signal(signal.SIGKILL)
    first.wait(WAIT_S)

    with SQLiteStore(db) as store:  # the sweeper, once the dead worker's leases lapsed
        sweeper = Scheduler(store, config=SchedulerConfig(lease_s=1.0))
        swept = sweeper.sweep(time.time() + 5.0)
        assert swept and all(t.status is TaskStatus.PENDING for t in swept)

    second = _worker(db, effects, ok_groups=-1, worker_id="second")
    assert second.stdout is not None
    assert second.stdout.readline().strip() == "drained"
    assert second.wait(WAIT_S) == 0

    with SQLiteStore(db) as store:
        tasks = store.all_tasks()
    assert len(tasks) == TASKS
    assert all(t.status is TaskStatus.SUCCESS for t in tasks)  # each ended, once
    runs = collections.Counter(line.split()[0] for line in effects.read_text().splitlines())
    assert set(runs) == {t.task_id for t in tasks}  # nothing lost
    twice = {task_id for task_id, n in runs.items() if n == 2}
    assert len(twice) == held and max(runs.values()) == 2  # only the uncommitted group
    by_id = {t.task_id: t for t in tasks}
    assert all(by_id[task_id].retry_count == 1 for task_id in twice)
