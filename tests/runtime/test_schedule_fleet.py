"""Four `taskfuse worker` processes, one schedule every second, 60 seconds: exactly 60
batches, none twice, while one worker is killed (SIGKILL) and started again in the middle.

Every process runs the schedule role and tries every tick; the store's dedupe must let one
batch per tick in. Real processes on a real SQLite file and on PostgreSQL, the two fleets side
by side in one minute (they mostly wait for their ticks). Slow by nature (about 70 s: the goal
is 60 ticks of one second).
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.core.ticks import tick_batch_id
from tests.store.backends import drop_schema, need_pg, new_schema, pg_url

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
TICKS = 60
WAIT_S = 60.0  # generous bound of each wait: only a hang reaches it
NAME = "every-second"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    from taskfuse.store.sqlite import SQLiteStore

    db = tmp_path / "fleet.db"
    store = SQLiteStore(db)  # created (and migrated) before the workers open it
    yield f"sqlite:///{db}", store
    store.close()


@pytest.fixture
def postgres_store() -> Iterator[tuple[str, Any]]:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    url = pg_url(schema)
    store = PostgresStore(url)
    yield url, store
    store.close()
    drop_schema(schema)


def _wait(condition: Any, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def _until(wall: float) -> None:
    """Wait for a wall-clock time (the test's own schedule: when to kill, when to restart)."""
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 0.5))


@pytest.mark.slow
def test_four_workers_submit_each_tick_of_a_minute_once(
        sqlite_store: Any, postgres_store: Any, tmp_path: Path) -> None:
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(_a_fleets_minute, *fleet, tmp_path / name)
                for name, fleet in (("sqlite", sqlite_store), ("postgres", postgres_store))]
        for run in runs:
            run.result()  # either fleet's failure, with its own message


def _a_fleets_minute(url: str, store: Any, tmp_path: Path) -> None:
    tmp_path.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(worker: str) -> None:
        with (tmp_path / f"{worker}.log").open("w") as sink:
            procs[worker] = subprocess.Popen(
                [sys.executable, "-m", "taskfuse.cli", "worker", "--store", url, "--app",
                 "tests.runtime.schedule_app:app", "--workers", "1", "--id", worker,
                 "--grace", "5"],
                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    def beating(*workers: str) -> bool:
        return set(workers) <= {w.worker_id for w in store.workers()}

    try:
        for i in range(PROCESSES):
            start(f"w{i}")
        _wait(lambda: beating(*procs), "four workers' first beats")
        first = math.ceil(time.time()) + 1  # the window: ticks first .. first + 59
        window = [tick_batch_id(NAME, first + i) for i in range(TICKS)]
        _until(first + 20.5)
        procs["w0"].kill()  # no shutdown: whatever it was doing is cut
        procs["w0"].wait(WAIT_S)
        _until(first + 30.5)
        start("w0-again")
        _wait(lambda: beating("w0-again"), "the restarted worker's first beat")
        _until(first + TICKS)
        _wait(lambda: store.get_batch(window[-1]) is not None, "the window's last batch")
        _wait(lambda: all(store.counts(b)[TaskStatus.SUCCESS] == 1 for b in window),
              "every batch of the window done")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {w: proc.wait(WAIT_S) for w, proc in procs.items()}
    logs = {w: (tmp_path / f"{w}.log").read_text() for w in procs}
    assert codes == {"w0": -signal.SIGKILL, "w1": 0, "w2": 0, "w3": 0, "w0-again": 0}, logs
    ours = sorted(b for b in store.batch_ids() if b.startswith(f"{NAME}@"))
    inside = [b for b in ours if window[0] <= b <= window[-1]]
    assert inside == window  # 60 batches, one per tick, no tick missed
    tasks = [t for b in window for t in store.batch_tasks(b)]
    assert len(tasks) == TICKS and {t.status for t in tasks} == {TaskStatus.SUCCESS}
    assert len({t.idempotency_key for t in tasks}) == TICKS
    # each tick was put in by exactly one process (the others found it): never twice
    created = Counter(m for text in logs.values()
                      for m in re.findall(rf"submitted batch ({NAME}@\S+)", text))
    assert {b: created[b] for b in window if created[b] != 1} == {}
    makers = {w for w, text in logs.items() if "submitted batch" in text}
    assert len(makers) >= 2, makers  # the fleet shared the ticks
