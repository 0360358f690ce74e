"""Permanent store errors fail the call at once with their reason; only outages are retried.

Issue 27, item 7: PostgreSQL refusing an index entry too large (a 4 kB idempotency key) was
retried for 60 s as a broken connection, then reported "unavailable".
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import TaskSpec
from taskfuse.store import StoreError, StoreUnavailable
from taskfuse.store.classify import transient
from tests.store.backends import postgres_store


def test_an_index_entry_too_large_fails_the_submit_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key = secrets.token_urlsafe(6_000)  # incompressible: above btree's 2,704-byte entry
    with postgres_store(tmp_path, retry_for=5.0) as store:
        with caplog.at_level(logging.WARNING), pytest.raises(StoreError) as raised:
            Scheduler(store).submit(TaskSpec("k", idempotency_key=key), 1.0)
        assert not isinstance(raised.value, StoreUnavailable)
        assert "index row" in str(raised.value)
        assert not [r for r in caplog.records if "retrying" in r.getMessage()]  # no retry
        assert not any(store.counts().values())
        Scheduler(store).submit(TaskSpec("k", idempotency_key="short"), 2.0)  # store is fine


@pytest.mark.parametrize(("exc", "expected"), [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (PoolTimeout("couldn't get a connection after 5.00 sec"), True),
    (pg_errors.AdminShutdown(), True),
    (pg_errors.CannotConnectNow(), True),
    (pg_errors.TooManyConnections(), True),
    (pg_errors.SerializationFailure(), True),
    (pg_errors.ProgramLimitExceeded(), False),  # index row size exceeds maximum
    (pg_errors.UniqueViolation(), False),
    (pg_errors.NumericValueOutOfRange(), False),
    (pg_errors.QueryCanceled(), False),
    (pg_errors.InsufficientPrivilege(), False),
    (sqlite3.OperationalError("database is locked"), True),
    (sqlite3.OperationalError("database or disk is full"), False),
    (sqlite3.IntegrityError("UNIQUE constraint failed"), False),
    (ValueError("not a store error"), False),
])
def test_the_classifier(exc: BaseException, expected: bool) -> None:
    assert transient(exc) is expected
