"""SQLite keeps its counts by status (migration 4) and by batch (5): exact against a count of
every row under threads that claim and complete in groups while others count, across the
migrations of a file that already holds rows, and for a watcher of a file from before them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from taskfuse.core.states import TaskEvent, TaskStatus
from taskfuse.core.task import move
from taskfuse.store.sql import migrations, split_statements
from taskfuse.store.sqlite import SQLiteStore
from tests.store.counts_load import (
    SEEDED_BATCH_SQL,
    assert_kept_batches,
    assert_migrated_counts,
    drain_while_counting,
)
from tests.store.test_contract import T

THREADS = 4
TASKS = 400


def scanned(path: Path) -> dict[TaskStatus, int]:
    """Every row counted: what the kept counts must equal."""
    with sqlite3.connect(path) as conn:
        found = {TaskStatus(s): n for s, n in
                 conn.execute("SELECT status, count(*) FROM tasks GROUP BY status")}
    return {s: found.get(s, 0) for s in TaskStatus}



def scanned_batches(path: Path) -> dict[str, dict[TaskStatus, int]]:
    """Every batch's rows counted."""
    out: dict[str, dict[TaskStatus, int]] = {}
    with sqlite3.connect(path) as conn:
        for batch, status, n in conn.execute(
                "SELECT batch_id, status, count(*) FROM tasks WHERE batch_id IS NOT NULL "
                "GROUP BY batch_id, status"):
            out.setdefault(batch, dict.fromkeys(TaskStatus, 0))[TaskStatus(status)] = n
    return out


def test_kept_counts_match_every_row_under_claims_completions_and_counts(tmp_path) -> None:
    """Four threads claim in groups and complete in groups (successes, retries back to
    PENDING, failures), renewing leases on the way, while a fifth counts all along: every
    count adds up to the tasks submitted, and the last equals a count of every row."""
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    try:
        seen = drain_while_counting(store, TASKS, THREADS, renew=True)
        assert seen and set(seen) == {TASKS}
        final = store.counts()
        assert final == scanned(path)
        assert final[TaskStatus.PENDING] == final[TaskStatus.RUNNING] == 0
        assert final[TaskStatus.SUCCESS] + final[TaskStatus.FAILED] == TASKS
        assert final[TaskStatus.SUCCESS] > 0 and final[TaskStatus.FAILED] > 0
        assert_kept_batches(store, scanned_batches(path))
    finally:
        store.close()


def _file_at(path: Path, version: int, rows: int) -> Path:
    """A file migrated to `version` only, holding `rows` tasks (a third RUNNING)."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("CREATE TABLE taskfuse_migrations ("
                     "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
        for mig in migrations("sqlite")[:version]:
            for statement in split_statements(mig.sql, sqlite3.complete_statement):
                conn.execute(statement)
            conn.execute("INSERT INTO taskfuse_migrations VALUES (?, ?, 0)",
                         (mig.version, mig.name))
        conn.execute(
            "WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?) "
            "INSERT INTO tasks (task_id, kind, trace_id, status, version, retry_count, "
            "max_retry, timeout, created_at, downstreams, depends_on, batch_id) "
            "SELECT 'b' || n, 'k', 't', CASE WHEN n % 3 = 0 THEN 'RUNNING' ELSE 'SUCCESS' END, "
            f"1, 0, 0, 60, n, '[]', '[]', {SEEDED_BATCH_SQL.format(i='n')} FROM i", (rows,))
    return path


@pytest.mark.parametrize("version", [3, 4])
def test_the_migrations_count_a_file_that_already_holds_rows(tmp_path, version: int) -> None:
    """From before the counts by status (3) and from before those by batch (4)."""
    path = _file_at(tmp_path / "old.db", version, 3000)
    before, batches = scanned(path), scanned_batches(path)
    store = SQLiteStore(path)
    try:
        assert_migrated_counts(store, len(migrations("sqlite")), before, batches)
        with sqlite3.connect(path) as conn:  # the index of every row by status is gone
            names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master "
                                                "WHERE type = 'index'")}
        assert "tasks_status" not in names and "tasks_deadline" in names
    finally:
        store.close()


@pytest.mark.parametrize("version", [3, 4])
def test_a_watcher_of_a_file_from_before_counts_every_row(tmp_path, version: int) -> None:
    """A read-only store never migrates: on a file without kept counts it counts rows."""
    path = _file_at(tmp_path / "old.db", version, 30)
    watcher = SQLiteStore(path, read_only=True)
    try:
        assert watcher.schema_version() == version
        assert watcher.counts() == scanned(path)
        assert watcher.counts()[TaskStatus.RUNNING] == 10
        assert_kept_batches(watcher, scanned_batches(path))
    finally:
        watcher.close()


def test_a_submission_larger_than_a_statement_keeps_its_order_and_counts(tmp_path) -> None:
    """Rows go in many per statement (the insert trigger's set-up then costs once per
    group); a library that allows only 999 placeholders gets smaller groups."""
    from taskfuse.core.scheduler import Scheduler

    store = SQLiteStore(tmp_path / "t.db")
    try:
        store._conn().setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # 37 rows each
        store.insert([T(f"t{i}") for i in range(1234)])
        assert store.counts()[TaskStatus.PENDING] == 1234
        claimed = Scheduler(store).claim("w", 1.0, 1234).tasks  # type: ignore[union-attr]
        assert [t.task_id for t in claimed] == [f"t{i}" for i in range(1234)]
        assert store.counts()[TaskStatus.RUNNING] == 1234 == len(claimed)
    finally:
        store.close()


def test_a_group_of_completions_releases_children_and_ticks_as_moves_one_by_one(
        tmp_path) -> None:
    """Moves to an ended status go in one statement; the children a success releases and
    a retry's fresh tick still come in move order: claims then agree with MemoryStore."""
    from taskfuse.store.memory import MemoryStore

    def script(store) -> list[str]:
        store.insert([T("p"), T("q"), T("x", max_retry=2), T("f"), T("g")])
        store.insert([T("c1", depends_on=("p",)), T("c2", depends_on=("q",))])
        running = {t.task_id: t for t in store.claim("w", 1.0, 5, frozenset())}
        assert set(running) == {"p", "q", "x", "f", "g"}
        p, q, x, f, g = (running[k] for k in ("p", "q", "x", "f", "g"))
        won = store.swap_many([
            (move(p, TaskEvent.SUCCEED, 2.0, result=None), p.version),
            (move(x, TaskEvent.RETRY, 2.0, not_before=2.0, last_delay=0.0,
                  error_kind="error", error_msg="x"), x.version),
            (move(g, TaskEvent.FAIL, 2.0, error_kind="bad", error_msg="no"), g.version - 1),
            (move(q, TaskEvent.SUCCEED, 2.0, result=None), q.version),
            (move(f, TaskEvent.FAIL, 2.0, error_kind="bad", error_msg="no"), f.version),
        ])
        assert won == [True, True, False, True, True]  # g's move was stale: g still runs
        return [t.task_id for t in store.claim("w", 3.0, 10, frozenset())]

    memory = script(MemoryStore())
    store = SQLiteStore(tmp_path / "t.db")
    try:
        assert script(store) == memory
        assert sorted(memory) == ["c1", "c2", "x"]
        assert store.counts() == scanned(tmp_path / "t.db")
        assert store.counts()[TaskStatus.FAILED] == 1
        assert store.counts()[TaskStatus.RUNNING] == 4  # g, and the three just claimed
    finally:
        store.close()


def test_rows_deleted_by_hand_keep_every_count_exact(tmp_path) -> None:
    """An operator pruning old rows in SQL (there is no prune command): the kept counts, in
    all and by batch, still equal a count of the rows."""
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    try:
        drain_while_counting(store, 90, 2)
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM tasks WHERE status = 'SUCCESS' AND task_id LIKE 't1%'")
        assert store.counts() == scanned(path)
        assert_kept_batches(store, scanned_batches(path))
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM tasks")
        assert not any(store.counts().values()) and store.batch_ids() == []
    finally:
        store.close()
