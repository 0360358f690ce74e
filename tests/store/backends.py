"""How the store tests get real stores: SQLite files under tmp_path, PostgreSQL schemas.

PostgreSQL comes from TASKFUSE_PG_URL (default: the local test database). Every store gets
its own schema, dropped afterwards, so test runs (and xdist workers) never see each other.
When PostgreSQL cannot be reached the PostgreSQL tests fail under CI=true (a CI that skips
its database tests is lying) and are skipped with the reason everywhere else.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from taskfuse.store.memory import MemoryStore

PG_URL = os.environ.get("TASKFUSE_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@cache
def pg_problem() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it can."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - psycopg is a dependency
        return f"psycopg is not installed: {exc}"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        from taskfuse.store import redact_url

        return f"PostgreSQL at {redact_url(PG_URL)} unreachable: {exc}"
    return None


def need_pg() -> None:
    """Fail (in CI) or skip (elsewhere) the calling test when PostgreSQL is unreachable."""
    problem = pg_problem()
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {problem}", pytrace=False)
    pytest.skip(problem)


def new_schema() -> str:
    return f"tft_{uuid.uuid4().hex[:16]}"


def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pg_url(schema: str, **params: Any) -> str:
    sep = "&" if "?" in PG_URL else "?"
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    return f"{PG_URL}{sep}schema={schema}{extra}"


@contextmanager
def memory_store(tmp_path: Path) -> Iterator[MemoryStore]:
    yield MemoryStore()


@contextmanager
def sqlite_store(tmp_path: Path, **kw: Any) -> Iterator[Any]:
    from taskfuse.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / f"tasks-{uuid.uuid4().hex[:8]}.db", **kw)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def postgres_store(tmp_path: Path | None = None, **kw: Any) -> Iterator[Any]:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = kw.pop("schema", None) or new_schema()
    store = PostgresStore(pg_url(schema), **kw)
    try:
        yield store
    finally:
        store.close()
        drop_schema(schema)


StoreFactory = Callable[[Path], AbstractContextManager[Any]]

#: Every store the contract holds for, by name.
ALL_STORES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "postgres": postgres_store,
}
DURABLE: dict[str, StoreFactory] = {"sqlite": sqlite_store, "postgres": postgres_store}
