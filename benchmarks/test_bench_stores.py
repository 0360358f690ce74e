"""Durable stores: claim+complete throughput beside a minimal hand-written loop, and claim cost
as the table grows.

Throughput: W worker threads drain N no-op tasks, claiming 32 at a time and reporting each
completion with a compare-and-set. "store" goes through SQLiteStore / PostgresStore (`claim`,
then `swap(move(task, SUCCEED))` per task, or `swap_many` per claimed group); "minimal" is
the smallest loop that does the same work on a bare table in the same database and run: one
claim statement, one version-checked UPDATE per completion (or per group). Both commit every
reported completion durably with the database's default settings (SQLite synchronous=FULL,
PostgreSQL synchronous_commit=on). Tasks/s = N / median.

Claim cost: one claim of 32 rows when the table holds 10k rows vs 1M rows (990k finished);
the partial index over claimable rows keeps it flat.

    .venv/bin/python -m pytest benchmarks/test_bench_stores.py --benchmark-only
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from taskfuse.core.states import TaskEvent
from taskfuse.core.task import Task, move

PG_URL = os.environ.get("TASKFUSE_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
N = {"sqlite": 3000, "postgres": 2000}
BATCH = 32


def _pg_ok() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3):
            return True
    except Exception:  # any failure means: no database here
        return False


def _need(kind: str) -> None:
    if kind == "postgres" and not _pg_ok():
        pytest.skip("PostgreSQL unreachable")


def _threads(workers: int, body: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=body, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _tasks(n: int) -> list[Task]:
    now = time.time()
    return [Task(f"t{i}", "noop", trace_id=f"tr{i}", created_at=now) for i in range(n)]


# -- the stores ------------------------------------------------------------------------------


class StoreRig:
    """A fresh store per round; drain it with W threads through the Store protocol."""

    def __init__(self, kind: str, workers: int) -> None:
        self.kind = kind
        self.workers = workers
        self.tmp = tempfile.mkdtemp(prefix="bench-store-")
        self.store: Any = None
        self.schema = ""

    def fresh(self) -> None:
        self.close()
        if self.kind == "sqlite":
            from taskfuse.store.sqlite import SQLiteStore

            self.store = SQLiteStore(os.path.join(self.tmp, f"{uuid.uuid4().hex}.db"))
        else:
            from taskfuse.store.postgres import PostgresStore

            self.schema = f"bench_{uuid.uuid4().hex[:12]}"
            self.store = PostgresStore(f"{PG_URL}?schema={self.schema}",
                                       pool_max=self.workers + 2)
        self.store.insert(_tasks(N[self.kind]))

    def drain(self, grouped: bool) -> None:
        store = self.store

        def work(i: int) -> None:
            worker = f"w{i}"
            while True:
                claimed = store.claim(worker, time.time(), BATCH)
                if not claimed:
                    return
                now = time.time()
                if grouped:
                    store.swap_many([(move(t, TaskEvent.SUCCEED, now), t.version)
                                     for t in claimed])
                else:
                    for t in claimed:
                        store.swap(move(t, TaskEvent.SUCCEED, now), t.version)

        _threads(self.workers, work)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# -- the minimal loops -----------------------------------------------------------------------


MIN_SQLITE_DDL = (
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, priority INTEGER NOT NULL DEFAULT 0, "
    "status INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL DEFAULT 0, worker TEXT, "
    "payload TEXT)",
    "CREATE INDEX jobs_ready ON jobs (priority DESC, id) WHERE status = 0",
)
MIN_PG_DDL = (
    "CREATE TABLE jobs (id bigserial PRIMARY KEY, priority integer NOT NULL DEFAULT 0, "
    "status integer NOT NULL DEFAULT 0, version integer NOT NULL DEFAULT 0, worker text, "
    "payload jsonb)",
    "CREATE INDEX jobs_ready ON jobs (priority DESC, id) WHERE status = 0",
)


class MinimalRig:
    """The same work on a bare `jobs` table: claim 32 with one statement, complete with a
    version-checked UPDATE; nothing else (no DAG, caps, ticks, JSON decode or Task records)."""

    def __init__(self, kind: str, workers: int) -> None:
        self.kind = kind
        self.workers = workers
        self.tmp = tempfile.mkdtemp(prefix="bench-min-")
        self.path = ""
        self.schema = ""

    def fresh(self) -> None:
        self.close()
        n = N[self.kind]
        if self.kind == "sqlite":
            self.path = os.path.join(self.tmp, f"{uuid.uuid4().hex}.db")
            conn = self._sqlite()
            for ddl in MIN_SQLITE_DDL:
                conn.execute(ddl)
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO jobs (payload) VALUES (NULL)", [()] * n)
            conn.execute("COMMIT")
            conn.close()
        else:
            import psycopg

            self.schema = f"bench_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {self.schema}")
                conn.execute(f"SET search_path TO {self.schema}")
                for ddl in MIN_PG_DDL:
                    conn.execute(ddl)
                conn.execute("INSERT INTO jobs (payload) SELECT NULL FROM generate_series(1, %s)",
                             [n])

    def _sqlite(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def drain(self, grouped: bool) -> None:
        if self.kind == "sqlite":
            lock = threading.Lock()  # as SQLiteStore does: threads queue in-process

            def work(i: int) -> None:
                conn = self._sqlite()
                while True:
                    with lock:
                        conn.execute("BEGIN IMMEDIATE")
                        rows = conn.execute(
                            "SELECT id, version FROM jobs WHERE status = 0 "
                            "ORDER BY priority DESC, id LIMIT ?", (BATCH,)).fetchall()
                        conn.executemany(
                            "UPDATE jobs SET status = 1, version = version + 1, worker = ? "
                            "WHERE id = ? AND version = ?", [(f"w{i}", r[0], r[1]) for r in rows])
                        conn.execute("COMMIT")
                    if not rows:
                        conn.close()
                        return
                    done = [(r[0], r[1] + 1) for r in rows]
                    sql = ("UPDATE jobs SET status = 2, version = version + 1 "
                           "WHERE id = ? AND version = ?")
                    if grouped:
                        with lock:
                            conn.execute("BEGIN IMMEDIATE")
                            conn.executemany(sql, done)
                            conn.execute("COMMIT")
                    else:
                        for job in done:
                            with lock:
                                conn.execute(sql, job)

            _threads(self.workers, work)
            return
        import psycopg

        def pg_work(i: int) -> None:
            with psycopg.connect(PG_URL, autocommit=True,
                                 options=f"-c search_path={self.schema}") as conn:
                while True:
                    rows = conn.execute(
                        "UPDATE jobs SET status = 1, version = version + 1, worker = %s "
                        "WHERE id IN (SELECT id FROM jobs WHERE status = 0 "
                        "ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED) "
                        "RETURNING id, version, payload", (f"w{i}", BATCH)).fetchall()
                    if not rows:
                        return
                    sql = ("UPDATE jobs SET status = 2, version = version + 1 "
                           "WHERE id = %s AND version = %s")
                    done = [(r[0], r[1]) for r in rows]
                    if grouped:
                        with conn.transaction():
                            conn.cursor().executemany(sql, done)
                    else:
                        for job in done:
                            conn.execute(sql, job)

        _threads(self.workers, pg_work)

    def close(self) -> None:
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


@pytest.mark.parametrize("commit", ["each", "grouped"])
@pytest.mark.parametrize("workers", [1, 4, 8])
@pytest.mark.parametrize("impl", ["store", "minimal"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_claim_complete(benchmark, kind: str, impl: str, workers: int, commit: str) -> None:
    """Drain N tasks; tasks/s = extra_info['tasks'] / median."""
    _need(kind)
    benchmark.group = f"stores: claim+complete {kind} commit={commit}"
    benchmark.extra_info["tasks"] = N[kind]
    rig: Any = (StoreRig if impl == "store" else MinimalRig)(kind, workers)
    try:
        benchmark.pedantic(rig.drain, args=(commit == "grouped",), setup=rig.fresh,
                           rounds=3, iterations=1)
    finally:
        rig.close()


# -- claim cost vs table size ----------------------------------------------------------------

PENDING = 10_000


def _fill_sqlite(store: Any, total: int, pending: int = PENDING) -> None:
    """Bulk rows straight into the table: (total - pending) finished, pending claimable."""
    conn = store._conn()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "
        "INSERT INTO tasks (task_id, kind, trace_id, priority, status, version, retry_count, "
        "max_retry, timeout, created_at, finished_at, ready_tick) "
        "SELECT 'b' || i, 'noop', 'tr' || i, i % 3, "
        "CASE WHEN i < ? THEN 'SUCCESS' ELSE 'PENDING' END, 0, 0, 3, 60.0, i, "
        "CASE WHEN i < ? THEN i END, i FROM n",
        (total, total - pending, total - pending),
    )
    conn.execute("COMMIT")


def _fill_postgres(store: Any, total: int, pending: int = PENDING) -> None:
    """As _fill_sqlite, then VACUUM ANALYZE so the planner sees the table as it is."""
    def op(conn: Any, _: bool) -> None:
        conn.execute(
            "INSERT INTO tasks (task_id, kind, trace_id, priority, status, version, "
            "retry_count, max_retry, timeout, created_at, finished_at) "
            "SELECT 'b' || i, 'noop', 'tr' || i, i %% 3, "
            "CASE WHEN i < %(done)s THEN 'SUCCESS' ELSE 'PENDING' END, 0, 0, 3, 60.0, i, "
            "CASE WHEN i < %(done)s THEN i END FROM generate_series(0, %(total)s - 1) AS i",
            {"done": total - pending, "total": total})
        conn.execute("VACUUM ANALYZE tasks")

    store._run(op)


@pytest.fixture(scope="module", params=[10_000, 1_000_000], ids=["10k", "1M"])
def filled(request) -> Iterator[tuple[str, Any]]:
    stores: dict[str, Any] = {}
    tmp = tempfile.mkdtemp(prefix="bench-size-")
    from taskfuse.store.sqlite import SQLiteStore

    stores["sqlite"] = SQLiteStore(os.path.join(tmp, "size.db"))
    _fill_sqlite(stores["sqlite"], request.param)
    schema = ""
    if _pg_ok():
        from taskfuse.store.postgres import PostgresStore

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        stores["postgres"] = PostgresStore(f"{PG_URL}?schema={schema}")
        _fill_postgres(stores["postgres"], request.param)
    yield request.param, stores
    for store in stores.values():
        store.close()
    if schema:
        _drop_schema(schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_claim_cost_vs_table_size(benchmark, filled, kind: str) -> None:
    """One claim of 32 ready rows; compare the 10k and 1M medians (must stay flat)."""
    size, stores = filled
    if kind not in stores:
        pytest.skip("PostgreSQL unreachable")
    store = stores[kind]
    benchmark.group = f"stores: claim 32 vs table size ({kind})"
    benchmark.extra_info["rows"] = size
    got = benchmark.pedantic(lambda: store.claim("w", 1e12, BATCH), rounds=150, iterations=1)
    assert len(got) == BATCH


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_counts_vs_table_size(benchmark, filled, kind: str) -> None:
    """`counts()` at 10k and 1M rows: both stores read their kept counts (must stay flat).
    extra_info carries the median of a count of every row in the same run (`scan_ms`), what
    counts() cost before they kept them."""
    size, stores = filled
    if kind not in stores:
        pytest.skip("PostgreSQL unreachable")
    store = stores[kind]
    benchmark.group = f"stores: counts() vs table size ({kind})"
    benchmark.extra_info["rows"] = size
    got = benchmark.pedantic(store.counts, rounds=20, iterations=1)
    assert sum(got.values()) == size
    if kind == "postgres":
        from taskfuse.store.postgres import Q

        def scan() -> float:
            began = time.perf_counter()
            store._run(lambda c, _: c.execute(Q["counts_scan"]).fetchall())
            return time.perf_counter() - began
    else:
        from taskfuse.store.sqlite import Q as SQ

        def scan() -> float:
            began = time.perf_counter()
            store._conn().execute(SQ["counts_scan"]).fetchall()
            return time.perf_counter() - began

    benchmark.extra_info["scan_ms"] = round(statistics.median(scan() for _ in range(5)) * 1000, 2)
