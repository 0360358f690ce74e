"""What only the durable stores promise: schema, JSON, URLs, grouped commits, waking idle
workers, indexed hot queries and closing. The shared behaviour is in test_contract.py."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.states import TaskEvent, TaskStatus
from taskfuse.core.task import Task, move
from taskfuse.store import PayloadError, StoreError, StoreUnavailable, StoreURLError, open_store
from taskfuse.store.sql import STATUS_VALUES, load_queries
from tests.store.backends import (
    DURABLE,
    PG_URL,
    drop_schema,
    need_pg,
    new_schema,
    pg_url,
    postgres_store,
    sqlite_store,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=sorted(DURABLE))
def store(request, tmp_path):
    with DURABLE[request.param](tmp_path) as made:
        yield made


def T(task_id: str, **kw) -> Task:
    kw.setdefault("trace_id", f"tr-{task_id}")
    return Task(task_id=task_id, kind="k", **kw)


# -- schema ----------------------------------------------------------------------------------


def _check_list(store) -> list[str]:
    """The status values the database's CHECK constraint allows, read back from the database."""
    if store.__class__.__name__ == "SQLiteStore":
        (ddl,) = store._conn().execute(
            "SELECT sql FROM sqlite_master WHERE name = 'tasks'").fetchone()
    else:
        ddl = store._run(lambda c, _: c.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'tasks_status_check' AND connamespace = %s::regnamespace",
            [store.schema]).fetchone()[0])
    clause = re.search(r"status\)?\s+(?:IN|=\s*ANY)\s*\((.*?)\)\)?", ddl, re.S | re.I)
    assert clause, ddl
    return re.findall(r"'([A-Z_]+)'", clause.group(1))


def test_status_check_lists_exactly_the_python_enum(store) -> None:
    assert sorted(_check_list(store)) == sorted(STATUS_VALUES) == sorted(s.value for s in
                                                                        TaskStatus)


def test_the_database_refuses_a_status_outside_the_enum(store) -> None:
    store.insert([T("a")])
    if store.__class__.__name__ == "SQLiteStore":
        import sqlite3

        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            store._conn().execute("UPDATE tasks SET status = 'LOST' WHERE task_id = 'a'")
    else:
        import psycopg

        with pytest.raises(psycopg.errors.CheckViolation):
            store._run(lambda c, _: c.execute(
                "UPDATE tasks SET status = 'LOST' WHERE task_id = 'a'"))
    assert store.get("a").status is TaskStatus.PENDING


def test_migrations_are_recorded_and_reopening_applies_nothing_twice(tmp_path) -> None:
    from taskfuse.store.sqlite import SQLiteStore

    path = tmp_path / "t.db"
    with SQLiteStore(path) as first:
        first.insert([T("a")])
        version = first.schema_version()
    assert version >= 1
    with SQLiteStore(path) as again:
        assert again.schema_version() == version
        assert again.get("a") is not None


class _Opener:
    """Opens a PostgreSQL store of `schema` from any thread, keeping what came of it."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.opened: list[Any] = []
        self.errors: list[BaseException] = []

    def open_one(self) -> None:
        from taskfuse.store.postgres import PostgresStore

        try:
            self.opened.append(PostgresStore(pg_url(self.schema), pool_max=1))
        except BaseException as exc:
            self.errors.append(exc)


def test_postgres_schema_is_versioned_and_concurrent_openers_agree() -> None:
    need_pg()
    schema = new_schema()
    opener = _Opener(schema)
    opened, errors = opener.opened, opener.errors
    threads = [threading.Thread(target=opener.open_one) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        versions = {s.schema_version() for s in opened}
        assert versions == {8}  # tasks, fleet limits, workers, pending_since, counts, ops
        rows = opened[0]._run(lambda c, _: c.execute(
            "SELECT version, name FROM taskfuse_migrations ORDER BY version").fetchall())
        assert rows == [(1, "tasks"), (2, "fleet_limits"), (3, "workers"),
                        (4, "pending_since"), (5, "task_counts"), (6, "batch_counts"),
                        (7, "operator_retry"), (8, "done_channel")]
    finally:
        for s in opened:
            s.close()
        drop_schema(schema)


def test_a_session_ended_while_opening_is_opened_again_and_migrates_once() -> None:
    """A worker that starts as the server restarts (or an administrator ends its session)
    opens its store anyway: the opening's transaction is run again, nothing applied twice."""
    need_pg()
    import psycopg


    schema = new_schema()
    opener = _Opener(schema)
    opened, errors = opener.opened, opener.errors
    open_one = opener.open_one
    waiting = ("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
               "AND wait_event_type = 'Lock'")
    thread = threading.Thread(target=open_one)
    try:
        with psycopg.connect(PG_URL, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(hashtext(%s))",
                           [f"taskfuse-migrate:{schema}"])
            thread.start()
            deadline = time.monotonic() + 30
            while not (pids := holder.execute(waiting, [f"taskfuse:{schema}"]).fetchall()):
                assert time.monotonic() < deadline and thread.is_alive(), errors
                time.sleep(0.01)
            holder.execute("SELECT pg_terminate_backend(%s)", [pids[0][0]])
            holder.execute("SELECT pg_advisory_unlock(hashtext(%s))",
                           [f"taskfuse-migrate:{schema}"])
        thread.join(60)
        assert not errors, errors
        (store,) = opened
        rows = store._run(lambda c, _: c.execute(
            "SELECT version FROM taskfuse_migrations ORDER BY version").fetchall())
        assert [v for (v,) in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
    finally:
        for s in opened:
            s.close()
        drop_schema(schema)


def test_every_named_query_is_used_or_documented() -> None:
    import pathlib

    import taskfuse.store as pkg

    code = "".join(p.read_text() for p in pathlib.Path(pkg.__file__).parent.rglob("*.py"))
    for dialect in ("sqlite", "postgres"):
        unused = [n for n in load_queries(dialect) if f'"{n}"' not in code]
        assert not unused, f"{dialect}: queries nobody runs: {unused}"


# -- JSON ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [{1, 2}, object(), float("nan"), {"when": time}])
def test_unserializable_payload_names_the_task_and_writes_nothing(store, bad) -> None:
    with pytest.raises(PayloadError, match=r"'t-bad'.*payload") as info:
        store.insert([T("ok-1"), T("t-bad", payload=bad), T("ok-2")])
    assert isinstance(info.value, StoreError)
    assert info.value.task_id == "t-bad"
    assert store.all_tasks() == []


def test_unserializable_result_refuses_the_move_and_writes_nothing(store) -> None:
    store.insert([T("a")])
    [a] = store.claim("w", 1.0, 1)
    with pytest.raises(PayloadError, match=r"'a'.*result"):
        store.swap(move(a, TaskEvent.SUCCEED, 2.0, result={"x": {1, 2}}), a.version)
    assert store.get("a") == a


# -- URLs and errors -------------------------------------------------------------------------


def test_open_store_opens_each_durable_store_by_url(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/by-url.db?synchronous=NORMAL&cache_mb=8")
    try:
        assert store.__class__.__name__ == "SQLiteStore"
        assert store.synchronous == "NORMAL"
        # the page cache each connection gets (SQLite counts negative sizes in KiB)
        assert store._conn().execute("PRAGMA cache_size").fetchone()[0] == -8 * 1024
        assert (tmp_path / "by-url.db").exists()
    finally:
        store.close()
    need_pg()
    schema = new_schema()
    store = open_store(pg_url(schema))
    try:
        assert store.__class__.__name__ == "PostgresStore" and store.schema == schema
        store.insert([T("a")])
        assert store.get("a") is not None
    finally:
        store.close()
        drop_schema(schema)


@pytest.mark.parametrize("url", ["mysql://u:pw@h/db", "sqlite://", "sqlite:///x.db?journal=1",
                                 "sqlite:///x.db?cache_mb=0", "sqlite:///x.db?cache_mb=lots",
                                 "sqlite:///x.db?cache_mb=inf", "sqlite:///x.db?cache_mb=nan",
                                 "postgresql://u:s3cret@h/db?schema=Bad-Name"])
def test_bad_urls_are_refused_without_showing_credentials(url) -> None:
    with pytest.raises(StoreURLError) as info:
        open_store(url)
    assert "s3cret" not in str(info.value) and "pw@" not in str(info.value)


def test_unreachable_postgres_is_a_clear_error_without_the_password(caplog) -> None:
    from taskfuse.store.postgres import PostgresStore

    url = "postgresql://admin:s3cret-pw@127.0.0.1:1/test?connect_timeout=2"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cannot reach PostgreSQL") as info:
        PostgresStore(url)
    assert time.monotonic() - started < 10
    assert "s3cret-pw" not in str(info.value) and "admin:***@127.0.0.1:1" in str(info.value)
    assert "s3cret-pw" not in caplog.text


def test_a_store_refuses_work_after_close(store) -> None:
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.insert([T("a")])


# -- grouped commits -------------------------------------------------------------------------


def test_swap_many_checks_each_move_on_its_own(store) -> None:
    store.insert([T("up"), T("b"), T("c"), T("child", depends_on=("up",))])
    claimed = {t.task_id: t for t in store.claim("w", 1.0, 3)}
    stale = claimed["c"]
    assert store.swap(move(stale, TaskEvent.CANCEL, 1.5), stale.version)  # c moved on
    answers = store.swap_many([
        (move(claimed["up"], TaskEvent.SUCCEED, 2.0, result=1), claimed["up"].version),
        (move(claimed["b"], TaskEvent.RETRY, 2.0, not_before=5.0), claimed["b"].version),
        (move(stale, TaskEvent.SUCCEED, 2.0), stale.version),
    ])
    assert answers == [True, True, False]
    assert store.get("c").status is TaskStatus.CANCELED
    assert [t.task_id for t in store.claim("w", 3.0, 5)] == ["child"]  # up's SUCCESS released it
    assert store.next_ready_at(3.0) == 5.0
    assert store.swap_many([]) == []


def test_a_group_of_ends_stores_every_field_exactly(store) -> None:
    """The usual group (every move ends its task) is one statement: each record reads back
    as written, floats to the last bit and text as given, and only the stale move loses."""
    store.insert([T(f"t{i}") for i in range(4)])
    t0, t1, t2, t3 = store.claim("w", 1764680000.1234567, 4)
    assert store.swap(move(t3, TaskEvent.CANCEL, 1.5), t3.version)
    moves = [
        move(t0, TaskEvent.SUCCEED, 1764680001.0000002, result={"s": 'q"\\\n\u00e9\u2603'}),
        move(t1, TaskEvent.FAIL, 0.1 + 0.2, error_kind="error",
             error_msg="quote ' and \" and \\ and\ttab \U0001f600"),
        move(t2, TaskEvent.SUCCEED, 5e-324, result=[1.0000000000000002, 2.5e-8]),
        move(t3, TaskEvent.SUCCEED, 3.0),
    ]
    answers = store.swap_many([(m, old.version) for m, old in
                               zip(moves, (t0, t1, t2, t3), strict=True)])
    assert answers == [True, True, True, False]
    for written in moves[:3]:
        assert store.get(written.task_id) == written
    assert store.get("t3").status is TaskStatus.CANCELED


def test_swap_many_with_a_bad_result_writes_none_of_the_group(store) -> None:
    store.insert([T("a"), T("b")])
    a, b = store.claim("w", 1.0, 2)
    with pytest.raises(PayloadError, match="'b'"):
        store.swap_many([(move(a, TaskEvent.SUCCEED, 2.0), a.version),
                         (move(b, TaskEvent.SUCCEED, 2.0, result=object()), b.version)])
    assert store.counts()[TaskStatus.RUNNING] == 2


# -- waking idle workers ---------------------------------------------------------------------


def _wakes_on_submit(waiter, submitter) -> float:
    """Seconds between a submit through `submitter` and `waiter.wait_for_work` returning."""
    waiter.wait_for_work(0.01)  # let the waiter subscribe / read its starting point
    woke: list[float] = []

    def wait() -> None:
        if waiter.wait_for_work(5.0):
            woke.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    sent = time.monotonic()
    submitter.insert([T(f"wake-{sent}")])
    thread.join(6.0)
    assert woke, "wait_for_work never woke"
    return woke[0] - sent


def test_wait_for_work_times_out_quietly_when_nothing_happens(store) -> None:
    started = time.monotonic()
    assert store.wait_for_work(0.3) is False
    assert 0.25 <= time.monotonic() - started < 2.0


def test_postgres_wakes_an_idle_worker_of_another_store_by_notify(tmp_path) -> None:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    with postgres_store() as submitter:
        waiter = PostgresStore(pg_url(submitter.schema), pool_max=1)
        try:
            assert _wakes_on_submit(waiter, submitter) < 1.5  # woken, not timed out (5 s)
        finally:
            waiter.close()


_CLOSE_RACE = """
import sys, threading, time
from taskfuse.store.sqlite import SQLiteStore
for i in range(300):
    store = SQLiteStore(f"{sys.argv[1]}/t{i % 5}.db", poll_s=0.0001)
    waiter = threading.Thread(target=store.wait_for_work, args=(5,))
    waiter.start()
    time.sleep(0.002)  # inside its poll, most rounds
    store.close()
    waiter.join(6)
    assert not waiter.is_alive()
print("survived")
"""


def test_closing_a_sqlite_store_never_meets_a_poll_of_work_mid_statement(tmp_path) -> None:
    """A thread waiting for work polls its own connection; closing the store from another
    thread closed that connection under the poll and crashed the interpreter (a test suite
    died of it once; 300 rounds crashed every time). Run apart, so a crash is a failure."""
    proc = subprocess.run([sys.executable, "-c", _CLOSE_RACE, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "survived", proc.stderr[-2000:]


def test_sqlite_wakes_an_idle_worker_of_another_connection(tmp_path) -> None:
    from taskfuse.store.sqlite import SQLiteStore

    with sqlite_store(tmp_path) as submitter, SQLiteStore(submitter.path) as waiter:
        assert _wakes_on_submit(waiter, submitter) < 1.5  # woken, not timed out (5 s)
        assert _wakes_on_submit(submitter, submitter) < 1.5  # same store, another thread


# -- hot queries use their indexes -----------------------------------------------------------


HOT = {
    "claim_candidates": ("tasks_ready", {"now": 1.0, "blocked": "[]", "n": 32,
                                          "exclude": "[]"}),
    "has_unfinished": ("tasks_deadline", {}),
    "has_unfinished_batch": ("tasks_batch", {"batch_id": "b"}),
    "next_ready_at": ("tasks_delayed", {"now": 1.0}),
    "overdue": ("tasks_deadline", {"now": 1.0}),
    "next_deadline": ("tasks_deadline", {}),
    "waiting_since_before": ("tasks_waiting", {"cutoff": 1.0}),
    "get_task": ("task_id", {"task_id": "x"}),
}


#: Where a query searches more than one index. Both stores keep their counts by status in a
#: table (SQLite migration 4, PostgreSQL 5), so neither has an index of every row by status;
#: the partial indexes of RUNNING and of PENDING rows answer whether anything is unfinished.
ALL_INDEXES = {"has_unfinished": ["tasks_deadline", "tasks_waiting"]}


@pytest.mark.parametrize("name", sorted(HOT))
def test_sqlite_hot_queries_search_an_index_and_never_sort(tmp_path, name) -> None:
    from taskfuse.store.sqlite import Q

    index, params = HOT[name]
    with sqlite_store(tmp_path) as store:
        store.insert([T(f"t{i}", not_before=float(i % 7), priority=i % 3) for i in range(300)])
        store._conn().execute("ANALYZE")
        plan = " | ".join(r[3] for r in store._conn().execute("EXPLAIN QUERY PLAN " + Q[name],
                                                              params))
    for searched in ALL_INDEXES.get(name, [index]):
        assert searched in plan, plan
    scans = plan.replace("SCAN t USING", "")
    for partial in ALL_INDEXES.get(name, []):  # of live rows only; EXISTS stops at the first
        scans = scans.replace(f"SCAN tasks USING INDEX {partial}", "")
    assert "SCAN tasks" not in scans, plan
    # Sorting is allowed only among the rows the index range found (overdue: ties on the
    # deadline are ordered by claim), never a sort of the table.
    assert "TEMP B-TREE" not in plan.replace("TEMP B-TREE FOR RIGHT PART", ""), plan


@pytest.mark.parametrize("name", sorted(HOT))
def test_postgres_hot_queries_use_their_index_on_a_large_table(name) -> None:
    """On 20k rows, a third each SUCCESS, PENDING and RUNNING (has_unfinished on a table of
    finished rows with a few live ones: the case where a scan would cost)."""
    from taskfuse.store.postgres import Q

    index, params = HOT[name]
    params = {**params, "blocked": [], "exclude": []} if "blocked" in params else params
    with postgres_store(pool_max=1) as store:
        def plan(conn, _):
            conn.execute(
                "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
                "max_retry, timeout, created_at, not_before, started_at, priority) "
                "SELECT 'b' || i, 'k', 't', CASE WHEN %(live)s THEN "
                "(ARRAY['SUCCESS','PENDING','RUNNING'])[i %% 3 + 1] WHEN i %% 5000 = 0 THEN "
                "'PENDING' ELSE 'SUCCESS' END,"
                " 0, 0, 0, 60, i, CASE WHEN i %% 5 = 0 THEN i END, i, i %% 3 "
                "FROM generate_series(1, 20000) AS i", {"live": not name.startswith("has_")})
            conn.execute("ANALYZE tasks")
            rows = conn.execute("EXPLAIN " + Q[name], params).fetchall()
            return "\n".join(r[0] for r in rows)

        text = store._run(plan)
    key = "tasks_pkey" if index == "task_id" else index
    for searched in ALL_INDEXES.get(name, [key]):
        assert searched in text, text
    assert "Seq Scan on tasks" not in text, text


def test_postgres_claims_walk_the_ready_index_after_a_bulk_submit_into_a_finished_table(
) -> None:
    """Statistics taken while the table held only finished rows say PENDING is empty; a bulk
    submit then refreshes them, so a claim walks the ordered ready index (on 1M rows the
    status index and a sort of every PENDING row per claim made claims 35x slower)."""
    from taskfuse.store.postgres import _BULK_ROWS, Q

    params = {"now": 1e12, "blocked": [], "exclude": [], "n": 32, "status": "RUNNING",
              "bump": 1, "worker_id": "w", "token": "00000000-0000-0000-0000-000000000001"}
    with postgres_store(pool_max=1) as store:
        def finished(conn, _):
            conn.execute(
                "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
                "max_retry, timeout, created_at, finished_at) "
                "SELECT 'b' || i, 'k', 't', 'SUCCESS', 0, 0, 0, 60, i, i "
                "FROM generate_series(1, 50000) AS i")
            conn.execute("ANALYZE tasks")

        store._run(finished)
        store.insert([T(f"t{i}") for i in range(2 * _BULK_ROWS)])

        def plan(conn, _):
            with conn.transaction(force_rollback=True):
                rows = conn.execute("EXPLAIN (ANALYZE) " + Q["claim_one_statement"],
                                    params).fetchall()
            estimate = conn.execute(Q["pending_estimate"]).fetchone()[0][0]["Plan"]["Plan Rows"]
            return "\n".join(r[0] for r in rows), estimate

        text, estimate = store._run(plan)
    assert estimate >= _BULK_ROWS, estimate
    assert "Index Scan using tasks_ready" in text, text
    assert "Sort Key: t_1.priority" not in text, text
    # The claimed rows are found again by primary key, never by walking the PENDING rows.
    assert re.search(r"Index Scan using tasks_pkey on tasks t\b", text), text


# -- URL of the default test database is the one the environment gives ----------------------


def test_the_test_database_url_comes_from_the_environment() -> None:
    import os

    assert os.environ.get("TASKFUSE_PG_URL",
                                    "postgresql://postgres@127.0.0.1:5432/test") == PG_URL


def test_a_value_the_database_refuses_is_a_store_error_and_writes_nothing(store) -> None:
    payload = {"note": "nul \u0000 inside"}  # valid JSON; PostgreSQL's jsonb refuses it
    if store.__class__.__name__ == "SQLiteStore":
        store.insert([T("a", payload=payload)])
        assert store.get("a").payload == payload
        return
    with pytest.raises(StoreError, match="refused a value"):
        store.insert([T("a", payload=payload), T("b")])
    assert store.all_tasks() == []
