"""The PostgreSQL store's pool reconnects on a bounded schedule through psycopg_pool's public
options, and says so without flooding the log (the outage itself is measured in
tests/runtime/test_outage_recovery.py)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from taskfuse.store.postgres import _RECONNECT_MAX_S, _pool, _QuietReconnects


class _Refuser:
    """A TCP port that accepts and at once closes every connection: a database that does not
    answer. Counts the attempts and lets a test wait for the n-th."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.attempts = 0
        self.cond = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()
            with self.cond:
                self.attempts += 1
                self.cond.notify_all()

    def wait_for(self, attempts: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.attempts >= attempts, timeout)


@pytest.fixture
def refuser() -> Iterator[_Refuser]:
    server = _Refuser()
    yield server
    server.sock.close()


def test_the_pool_keeps_reconnecting_every_half_second_and_never_gives_up(
        refuser: _Refuser) -> None:
    """psycopg_pool's own schedule waits 1, 2, 4, 8 s: 5 attempts in the first 20 s (at 0, 1,
    3, 7 and 15 s), and gives up after 5 minutes. Ours tries at least every 0.5 s, for ever:
    8 attempts (4 s of its schedule) arrive well within 20 s even on a busy machine."""
    pool = _pool(f"host=127.0.0.1 port={refuser.port} user=x dbname=x connect_timeout=2",
                 min_size=1, max_size=1, open=False, name="taskfuse:reconnect-test")
    pool.open(wait=False)
    try:
        assert refuser.wait_for(8, timeout=20), refuser.attempts
    finally:
        pool.close(timeout=1)
    assert _RECONNECT_MAX_S == 0.5


def _failed(pool: str) -> logging.LogRecord:
    return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1,
                             "error connecting in %r: %s", (pool, "connection refused"), None)


def test_failed_reconnections_of_a_pool_are_logged_once_per_ten_seconds() -> None:
    quiet = _QuietReconnects()
    assert [quiet.filter(_failed("taskfuse:a")) for _ in range(20)] == [True] + [False] * 19
    assert quiet.filter(_failed("taskfuse:b"))  # another pool: its own first line
    assert quiet.filter(_failed("someone-elses-pool"))  # not ours: untouched
