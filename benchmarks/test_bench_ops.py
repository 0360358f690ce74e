"""Operator commands at scale: how soon `wait` sees a batch end, and what it asks meanwhile.

* wait: 4 worker processes (benchmarks/fleet_worker.py, 4 threads each) drain a batch of 10k
  no-op tasks; this process waits for the batch (`taskfuse.runtime.waiting.wait`, what
  `taskfuse wait` runs) from the moment the workers start. Figures, per store: `late_ms`,
  how long after the batch's last completion (its largest finished_at) the wait returned;
  `queries_per_s`, the store queries the waiter made (record reads and kept-count reads)
  per second of waiting; `wakeups_per_s`, the times the store's wake-up returned (PostgreSQL:
  done notifications; SQLite: data_version changes seen by its 50 ms poll). Side by side, in
  the same run: `poll_late_ms`, when a reference loop asking the kept counts every 10 ms
  (100 queries a second) first saw the batch ended: the part of the lateness that is the
  workers' own commit after stamping finished_at, which no waiter can beat; `own_ms` is
  late_ms - poll_late_ms, the waiter's own part.

* prune: the same 4 worker processes drain 20k no-op tasks from a store that also holds
  OLD finished rows (TASKFUSE_BENCH_PRUNE_ROWS, 200k by default; 1000000 for the issue's
  million, bulk-inserted by one SQL statement, the count triggers keeping the counts), once
  alone and once while this process prunes those rows (`taskfuse.runtime.retention.prune`,
  what `taskfuse prune` runs). Figures: tasks_per_s of each drain, their ratio, the rows the
  prune removed while the drain ran, and whether the kept counts equal a full count after.

    python -m pytest benchmarks/test_bench_ops.py --benchmark-only
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks.test_bench_stores import PG_URL, _drop_schema, _need
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Task
from taskfuse.runtime.waiting import wait
from taskfuse.store import open_store

ROOT = Path(__file__).resolve().parent.parent
N = 10_000
PROCESSES = 4


class CountingStore:
    """A store whose questions a waiter asks are counted (its wake-ups too)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.queries = 0
        self.wakeups = 0

    def get(self, task_id: str) -> Any:
        self.queries += 1
        return self.store.get(task_id)

    def get_batch(self, batch_id: str) -> Any:
        self.queries += 1
        return self.store.get_batch(batch_id)

    def counts(self, batch_id: str | None = None) -> Any:
        self.queries += 1
        return self.store.counts(batch_id)

    def wait_for_done(self, timeout: float) -> bool:
        woke: bool = self.store.wait_for_done(timeout)
        self.wakeups += woke
        return woke


def _ready_workers(url: str) -> list[subprocess.Popen[str]]:
    """PROCESSES fleet workers on `url`, each started and ready, waiting for "go"."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.fleet_worker", url, "4"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env=env) for _ in range(PROCESSES)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return procs


def _go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def _url(kind: str, tmp: str) -> tuple[str, str]:
    if kind == "sqlite":
        return f"sqlite:///{os.path.join(tmp, uuid.uuid4().hex)}.db", ""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    return f"{PG_URL}?schema={schema}", schema


def _one_wait(kind: str, tmp: str) -> dict[str, float]:
    url, schema = _url(kind, tmp)
    store = open_store(url)
    try:
        now = time.time()
        store.insert([Task(f"t{i}", "noop", batch_id="b", trace_id=f"tr{i}", created_at=now,
                           pending_since=now, timeout=60.0) for i in range(N)])
        procs = _ready_workers(url)
        counting = CountingStore(store)
        seen: list[float] = []
        poller = threading.Thread(target=_poll, args=(store, seen), daemon=True)
        poller.start()
        _go(procs)
        got = wait(counting, "b", 600.0)  # type: ignore[arg-type]
        returned = time.time()
        assert got.done and got.status == "ALL_SUCCESS", got
        last = max(t.finished_at or 0.0 for t in store.batch_tasks("b"))
        for proc in procs:
            proc.wait(120)
        poller.join(60)
        return {"late_ms": (returned - last) * 1000, "poll_late_ms": (seen[0] - last) * 1000,
                "own_ms": (returned - seen[0]) * 1000,
                "waited_s": got.waited_s,
                "queries_per_s": counting.queries / got.waited_s,
                "wakeups_per_s": counting.wakeups / got.waited_s}
    finally:
        store.close()  # type: ignore[attr-defined]
        if schema:
            _drop_schema(schema)


def _poll(store: Any, seen: list[float]) -> None:
    """The reference: ask the kept counts every 10 ms until the batch has ended."""
    while True:
        counts = store.counts("b")
        if not counts[TaskStatus.PENDING] and not counts[TaskStatus.RUNNING]:
            seen.append(time.time())
            return
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_wait_for_a_batch_of_10k(benchmark, kind: str) -> None:
    _need(kind)
    tmp = tempfile.mkdtemp(prefix="bench-wait-")
    runs: list[dict[str, float]] = []
    benchmark.group = f"wait: a batch of {N} tasks, {PROCESSES} worker processes"
    # 10k tasks a round: about 5 s of draining, a minute with set-up
    benchmark.pedantic(lambda: runs.append(_one_wait(kind, tmp)), rounds=5, iterations=1)

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 2)

    late = sorted(r["late_ms"] for r in runs)
    benchmark.extra_info.update({
        "late_ms_median": median("late_ms"), "late_ms_max": round(late[-1], 1),
        "poll_late_ms_median": median("poll_late_ms"), "own_ms_median": median("own_ms"),
        "queries_per_s_median": median("queries_per_s"),
        "late_ms": [round(r["late_ms"], 1) for r in runs],
        "poll_late_ms": [round(r["poll_late_ms"], 1) for r in runs],
        "queries_per_s": [round(r["queries_per_s"], 2) for r in runs],
        "wakeups_per_s": [round(r["wakeups_per_s"], 2) for r in runs],
        "waited_s": [round(r["waited_s"], 2) for r in runs],
    })
    print(f"\n{kind}: {benchmark.extra_info}")


OLD = int(os.environ.get("TASKFUSE_BENCH_PRUNE_ROWS", "200000"))
DRAIN = 20_000
#: One statement that inserts OLD finished rows, ended 30 days ago (the count triggers
#: fire: the kept counts hold them); far faster than a million submits.
_FILL_OLD = {
    "postgres": "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
                "max_retry, timeout, created_at, started_at, finished_at) "
                "SELECT 'old' || i, 'noop', 'o' || i, 'SUCCESS', 2, 0, 3, 60, %(t)s, %(t)s, "
                "%(t)s + 1 FROM generate_series(0, %(n)s - 1) AS i",
    "sqlite": "WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < :n) "
              "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
              "max_retry, timeout, created_at, started_at, finished_at) "
              "SELECT 'old' || n, 'noop', 'o' || n, 'SUCCESS', 2, 0, 3, 60, :t, :t, :t + 1 "
              "FROM i",
}


def _fill_for_prune(kind: str, url: str, schema: str, store: Any) -> None:
    long_ago = time.time() - 30 * 86400
    if kind == "postgres":
        import psycopg

        with psycopg.connect(PG_URL) as conn:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute(_FILL_OLD[kind], {"t": long_ago, "n": OLD})
            conn.execute("ANALYZE tasks")
    else:
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_FILL_OLD[kind], {"t": long_ago, "n": OLD})
        conn.execute("COMMIT")
        conn.close()
    now = time.time()
    for start in range(0, DRAIN, 5000):
        store.insert([Task(f"t{i}", "noop", trace_id=f"tr{i}", created_at=now,
                           pending_since=now, timeout=60.0)
                      for i in range(start, min(DRAIN, start + 5000))])


def _full_count(kind: str, url: str, schema: str) -> dict[str, int]:
    """Rows by status, counted row by row (not from the kept counts)."""
    query = "SELECT status, count(*) FROM tasks GROUP BY status"
    if kind == "postgres":
        import psycopg

        with psycopg.connect(PG_URL) as conn:
            conn.execute(f"SET search_path TO {schema}")
            return dict(conn.execute(query).fetchall())
    import sqlite3

    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return dict(conn.execute(query).fetchall())
    finally:
        conn.close()


def _drain_with(kind: str, tmp: str, pruning: bool) -> dict[str, float]:
    from taskfuse.runtime.retention import PruneReport, prune

    url, schema = _url(kind, tmp)
    store = open_store(url)
    try:
        filled = time.perf_counter()
        _fill_for_prune(kind, url, schema, store)
        filled = time.perf_counter() - filled
        procs = _ready_workers(url)
        stop = threading.Event()
        report: list[PruneReport] = []
        pruner = threading.Thread(target=lambda: report.append(
            prune(store, 86400.0, time.time(), stop=stop)))
        start = time.perf_counter()
        _go(procs)
        if pruning:
            pruner.start()
        claimed = 0
        for proc in procs:
            assert proc.stdout is not None
            claimed += int(proc.stdout.readline().split()[1])
        drained = time.perf_counter() - start
        removed_during = OLD - store.counts()[TaskStatus.SUCCESS] + DRAIN if pruning else 0
        rest = 0
        if pruning:  # the prune paced for live workers stops; the rest goes without pauses
            stop.set()
            pruner.join()
            rest = prune(store, 86400.0, time.time(), pause_s=0.0).total
        pruned_s = time.perf_counter() - start
        for proc in procs:
            proc.wait(60)
        assert claimed == DRAIN
        assert store.counts()[TaskStatus.SUCCESS] == (DRAIN if pruning else OLD + DRAIN)
        full = _full_count(kind, url, schema)
        exact = all(store.counts()[s] == full.get(s.value, 0) for s in TaskStatus)
        assert exact, (store.counts(), full)
        return {"tasks_per_s": DRAIN / drained, "removed_during": removed_during,
                "prune_s": pruned_s if pruning else 0.0, "fill_s": filled,
                "removed": report[0].total + rest if report else 0, "counts_exact": exact}
    finally:
        store.close()  # type: ignore[attr-defined]
        if schema:
            _drop_schema(schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_drain_while_pruning(benchmark, kind: str) -> None:
    _need(kind)
    tmp = tempfile.mkdtemp(prefix="bench-prune-")
    runs: dict[str, list[dict[str, float]]] = {"alone": [], "pruning": []}

    def both() -> None:  # side by side in each round
        runs["alone"].append(_drain_with(kind, tmp, pruning=False))
        runs["pruning"].append(_drain_with(kind, tmp, pruning=True))

    benchmark.group = f"prune {OLD} old rows while {PROCESSES} processes drain {DRAIN}"
    benchmark.pedantic(both, rounds=1, iterations=1)
    alone = runs["alone"][0]["tasks_per_s"]
    with_prune = runs["pruning"][0]
    benchmark.extra_info.update({
        "tasks_per_s_alone": round(alone, 1),
        "tasks_per_s_pruning": round(with_prune["tasks_per_s"], 1),
        "ratio": round(with_prune["tasks_per_s"] / alone, 3),
        "removed_during_drain": with_prune["removed_during"],
        "prune_s": round(with_prune["prune_s"], 1), "removed": with_prune["removed"],
        "fill_s": round(with_prune["fill_s"], 1),
        "counts_exact": with_prune["counts_exact"] and runs["alone"][0]["counts_exact"],
    })
    print(f"\n{kind}: {benchmark.extra_info}")
