"""PostgreSQL keeps its counts by status (migration 5) and by batch (6): exact against a
count of every row under concurrent writers and folders, across the migrations of a table
that already holds rows, and for a watcher of a schema from before them."""

from __future__ import annotations

import psycopg
import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from taskfuse.store.sql import migrations
from tests.store.backends import PG_URL, drop_schema, need_pg, new_schema, pg_url
from tests.store.counts_load import (
    SEEDED_BATCH_SQL,
    assert_kept_batches,
    assert_migrated_counts,
    drain_while_counting,
)
from tests.store.test_contract import T

THREADS = 4
TASKS = 400


def scanned(schema: str) -> dict[TaskStatus, int]:
    """Every row counted: what the kept counts must equal."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(f"SELECT status, count(*) FROM {schema}.tasks GROUP BY status")
        found = {TaskStatus(s): n for s, n in rows.fetchall()}
    return {s: found.get(s, 0) for s in TaskStatus}


def scanned_batches(schema: str) -> dict[str, dict[TaskStatus, int]]:
    """Every batch's rows counted."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(f"SELECT batch_id, status, count(*) FROM {schema}.tasks "
                            "WHERE batch_id IS NOT NULL GROUP BY batch_id, status").fetchall()
    out: dict[str, dict[TaskStatus, int]] = {}
    for batch, status, n in rows:
        out.setdefault(batch, dict.fromkeys(TaskStatus, 0))[TaskStatus(status)] = n
    return out


def deltas(schema: str) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {schema}.task_count_deltas")
                   .fetchone()[0])  # type: ignore[index]


def test_kept_counts_match_every_row_under_concurrent_claims_completions_and_folds() -> None:
    """Four threads claim in groups and complete in groups (successes, retries back to
    PENDING, failures) while a fifth counts, and so folds, all along: every count it saw
    adds up to the tasks submitted, and the last equals a count of every row."""
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    store = PostgresStore(pg_url(schema), pool_max=THREADS + 2)
    try:
        seen = drain_while_counting(store, TASKS, THREADS)
        assert seen and set(seen) == {TASKS}
        final = store.counts()
        assert final == scanned(schema)
        assert final[TaskStatus.PENDING] == final[TaskStatus.RUNNING] == 0
        assert final[TaskStatus.SUCCESS] + final[TaskStatus.FAILED] == TASKS
        assert deltas(schema) == 0  # the last count folded them all
        assert_kept_batches(store, scanned_batches(schema))
    finally:
        store.close()
        drop_schema(schema)



def test_a_worker_beat_folds_the_deltas() -> None:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    store = PostgresStore(pg_url(schema), pool_max=1)
    try:
        store.insert([T(f"t{i}") for i in range(5)])
        store.claim("w", 1.0, 2, frozenset())
        assert deltas(schema) > 0  # the insert's and the claim's, not folded yet
        store.beat_worker(WorkerBeat("w", "app", 4, 2, 0, {}, 2, 0, 0, 1.0, 2.0))
        assert deltas(schema) == 0
        assert store.counts() == scanned(schema)
    finally:
        store.close()
        drop_schema(schema)


def _schema_at(version: int, rows: int) -> str:
    """A schema migrated to `version` only, holding `rows` tasks (a third RUNNING)."""
    schema = new_schema()
    with psycopg.connect(PG_URL) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        conn.execute("CREATE TABLE taskfuse_migrations (version integer PRIMARY KEY, "
                     "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        for mig in migrations("postgres")[:version]:
            conn.execute(mig.sql.encode())
            conn.execute("INSERT INTO taskfuse_migrations (version, name) VALUES (%s, %s)",
                         [mig.version, mig.name])
        conn.execute(
            "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
            "max_retry, timeout, created_at, batch_id) SELECT 'b' || i, 'k', 't', "
            "CASE WHEN i %% 3 = 0 THEN 'RUNNING' ELSE 'SUCCESS' END, 1, 0, 0, 60, i, "
            + SEEDED_BATCH_SQL.format(i="i").replace("%", "%%")
            + " FROM generate_series(1, %s) AS i", [rows])
    return schema


@pytest.mark.parametrize("version", [4, 5])
def test_the_migrations_count_a_table_that_already_holds_rows(version: int) -> None:
    """From before the counts by status (4) and from before those by batch (5)."""
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = _schema_at(version, 3000)
    try:
        before, batches = scanned(schema), scanned_batches(schema)
        store = PostgresStore(pg_url(schema), pool_max=1)
        try:
            assert_migrated_counts(store, len(migrations("postgres")), before, batches)
        finally:
            store.close()
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("version", [4, 5])
def test_a_watcher_of_a_schema_from_before_counts_every_row(version: int) -> None:
    """A read-only store never migrates: on a schema without kept counts it counts rows."""
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = _schema_at(version, 30)
    try:
        watcher = PostgresStore(pg_url(schema), read_only=True, pool_max=1)
        try:
            assert watcher.counts() == scanned(schema)
            assert watcher.counts()[TaskStatus.RUNNING] == 10
            assert_kept_batches(watcher, scanned_batches(schema))
        finally:
            watcher.close()
    finally:
        drop_schema(schema)


def test_a_watcher_reads_kept_counts_without_writing() -> None:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    writer = PostgresStore(pg_url(schema), pool_max=1)
    try:
        writer.insert([T(f"t{i}") for i in range(3)])
        watcher = PostgresStore(pg_url(schema), read_only=True, pool_max=1)
        try:
            assert watcher.counts()[TaskStatus.PENDING] == 3  # the deltas, unfolded
            assert deltas(schema) == 1
        finally:
            watcher.close()
    finally:
        writer.close()
        drop_schema(schema)



def test_rows_deleted_or_truncated_by_hand_keep_every_count_exact() -> None:
    """An operator pruning old rows in SQL (there is no prune command) or emptying the
    table: the kept counts, in all and by batch, still equal a count of the rows."""
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    store = PostgresStore(pg_url(schema), pool_max=2)
    try:
        drain_while_counting(store, 90, 2)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {schema}.tasks WHERE status = 'SUCCESS' "
                         "AND task_id LIKE 't1%'")
        assert store.counts() == scanned(schema)
        assert_kept_batches(store, scanned_batches(schema))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {schema}.tasks CASCADE")
        assert not any(store.counts().values())
        assert store.batch_ids() == [] and not any(store.counts("left").values())
        store.insert([T("again", batch_id="left")])
        assert store.counts("left")[TaskStatus.PENDING] == 1 == store.counts()[TaskStatus.PENDING]
    finally:
        store.close()
        drop_schema(schema)
