"""A fleet of `taskfuse worker` processes on one SQLite file (synchronous=FULL, the default):
every task runs and ends exactly once, and no process ever sees "database is locked".

tests/store/test_processes.py holds the store under a bare Scheduler loop; this is the real
command with its Runner: group claims with a prefetch, group commits, a heartbeat and a
listener per process, four processes writing one file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from taskfuse.store.sqlite import SQLiteStore
from tests.runtime.effects_app import app

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
TASKS = 2_000
WAIT_S = 60.0  # generous: only a hang reaches it; the test takes a few seconds


def _wait(condition, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_four_worker_processes_on_one_sqlite_file(tmp_path: Path) -> None:
    db, effects = tmp_path / "fleet.db", tmp_path / "effects.txt"
    store = SQLiteStore(db)  # created (and migrated) before the workers open it
    # 2 ms per effect: one process's 2 threads alone need 2 s for the lot, so the fleet shares
    # it even where the first process to claim is scheduled far ahead of the others
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TASKFUSE_TEST_EFFECTS": str(effects),
           "TASKFUSE_TEST_EFFECT_S": "0.002"}
    procs, outputs = [], []
    try:
        for i in range(PROCESSES):
            out = tmp_path / f"worker-{i}.log"
            outputs.append(out)
            with out.open("w") as sink:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "taskfuse.cli", "worker", "--store",
                     f"sqlite:///{db}", "--app", "tests.runtime.effects_app:app",
                     "--workers", "2", "--id", f"w{i}", "--grace", "5"],
                    cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL))
        # every process is up (its first beat is in the store) before there is work: they
        # all claim from the start instead of the first one draining the lot
        _wait(lambda: len(store.workers()) == PROCESSES, "four workers' first beats")
        tasks = app.scheduler(store).submit_many(
            [TaskSpec("effect", payload=i) for i in range(TASKS)], time.time())
        _wait(lambda: store.counts()[TaskStatus.SUCCESS] == TASKS, "every task SUCCESS")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(WAIT_S) for proc in procs]
    logs = [out.read_text() for out in outputs]
    for text in logs:
        assert "locked" not in text.lower(), text
    assert codes == [0] * PROCESSES, "\n".join(logs)
    counts = store.counts()
    assert counts[TaskStatus.SUCCESS] == TASKS and sum(counts.values()) == TASKS
    ran = Counter(line.split()[1] for line in effects.read_text().splitlines())
    assert set(ran) == {t.task_id for t in tasks} and set(ran.values()) == {1}
    records = [store.get(t.task_id) for t in tasks]
    assert {r.retry_count for r in records} == {0}
    by_worker = Counter(r.worker_id for r in records)
    assert set(by_worker) <= {f"w{i}" for i in range(PROCESSES)}
    assert len(by_worker) >= 2, by_worker  # a fleet: the work was shared
    store.close()
