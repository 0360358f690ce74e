"""Worker processes for the multi-process store tests (run under multiprocessing "spawn").

A worker is the smallest honest loop around the real Scheduler: claim a handful, run each
task's side effect, report the outcome with `complete` (read + compare-and-set), and when
the queue looks empty, wait on the store's wake-up instead of spinning. Side effects go to
a table *outside* the task store's transactions, as a real task's would.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from typing import Any

from taskfuse.core.scheduler import Scheduler, SchedulerConfig, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task
from taskfuse.store import open_store

OK = Outcome.success(None)


class Effects:
    """Where task functions write their side effects: rows in a plain table."""

    def __init__(self, target: str, worker: str) -> None:
        self.worker = worker
        if target.startswith("sqlite:"):
            self.conn: Any = sqlite3.connect(target[len("sqlite:"):], timeout=60,
                                             isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=OFF")
            self.ph = "?"
            self.dedupe = "INSERT OR IGNORE INTO effects (key, task_id, worker) VALUES (?, ?, ?)"
        else:
            import psycopg

            self.conn = psycopg.connect(target, autocommit=True,
                                        application_name="taskfuse-test-effects")
            self.ph = "%s"
            self.dedupe = ("INSERT INTO effects (key, task_id, worker) VALUES (%s, %s, %s) "
                           "ON CONFLICT (key) DO NOTHING")

    def run(self, task: Task) -> None:
        """The task function: record the attempt; write the effect once per idempotency key."""
        ph = self.ph
        self.conn.execute(f"INSERT INTO attempts (task_id, worker) VALUES ({ph}, {ph})",
                          (task.task_id, self.worker))
        if task.idempotency_key:
            self.conn.execute(self.dedupe, (task.idempotency_key, task.task_id, self.worker))
        else:
            self.conn.execute(f"INSERT INTO effects (key, task_id, worker) VALUES "
                              f"({ph}, {ph}, {ph})", (task.task_id, task.task_id, self.worker))


def create_effect_tables(target: str) -> None:
    ddl = ["CREATE TABLE effects (key TEXT, task_id TEXT, worker TEXT)",
           "CREATE TABLE attempts (task_id TEXT, worker TEXT)",
           "CREATE UNIQUE INDEX effects_key ON effects (key)"]
    if target.startswith("sqlite:"):
        conn = sqlite3.connect(target[len("sqlite:"):], isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in ddl:
            conn.execute(statement)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            for statement in ddl:
                conn.execute(statement)


def drain(
    store_url: str,
    effects_target: str,
    worker: str,
    batch: int = 16,
    crash_after: int | None = None,
    task_s: float = 0.0,
    lease_s: float | None = None,
    idle_exit_s: float = 2.0,
) -> int:
    """Run tasks until nothing is PENDING or RUNNING for `idle_exit_s`; answers tasks done.

    `crash_after`: SIGKILL this very process right after the n-th side effect, before its
    completion is reported: the crash every at-least-once system must survive.
    """
    store = open_store(store_url)
    sched = Scheduler(store, config=SchedulerConfig(lease_s=lease_s))
    effects = Effects(effects_target, worker)
    done = 0
    idle_since: float | None = None
    while True:
        answer = sched.claim(worker, time.time(), batch)
        if isinstance(answer, Work):
            idle_since = None
            for task in answer.tasks:
                if task_s:
                    time.sleep(task_s)
                effects.run(task)
                done += 1
                if crash_after is not None and done >= crash_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                sched.complete(task, OK, time.time())
            continue
        counts = store.counts()
        if counts[TaskStatus.PENDING] == 0 and counts[TaskStatus.RUNNING] == 0:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > idle_exit_s:
                break
        store.wait_for_work(0.1)
    store.close()  # type: ignore[attr-defined]
    return done


def sweep_until_done(store_url: str, lease_s: float, stop_after_s: float = 120.0) -> int:
    """The orphan sweeper as its own process would run it; answers tasks it moved."""
    store = open_store(store_url)
    sched = Scheduler(store, config=SchedulerConfig(lease_s=lease_s))
    moved = 0
    deadline = time.monotonic() + stop_after_s
    while time.monotonic() < deadline:
        moved += len(sched.sweep(time.time()))
        counts = store.counts()
        if counts[TaskStatus.PENDING] == 0 and counts[TaskStatus.RUNNING] == 0:
            break
        time.sleep(0.2)
    store.close()  # type: ignore[attr-defined]
    return moved


def hold_permit_forever(store_url: str, name: str, limit: int, lease_s: float, ready: Any) -> None:
    """Take one permit of a fleet bulkhead, say so, and never give it back (until killed)."""
    from taskfuse.store.fleet_limits import FleetBulkhead

    store = open_store(store_url)
    bulkhead = FleetBulkhead(store, name, limit, lease_s=lease_s)  # type: ignore[arg-type]
    permit = bulkhead.acquire("doomed", timeout=10.0)
    ready.put(permit is not None)
    while True:
        time.sleep(1.0)


def use_bulkhead(store_url: str, name: str, limit: int, rounds: int, hold_s: float,
                 spans: Any) -> None:
    """Acquire, hold for `hold_s`, release, `rounds` times; report each (start, end) span."""
    from taskfuse.store.fleet_limits import FleetBulkhead

    store = open_store(store_url)
    bulkhead = FleetBulkhead(store, name, limit, lease_s=30.0)  # type: ignore[arg-type]
    for _ in range(rounds):
        with bulkhead.hold(f"pid-{os.getpid()}", timeout=30.0):
            start = time.time()
            time.sleep(hold_s)
            end = time.time()
        spans.put((start, end))
    store.close()  # type: ignore[attr-defined]
