"""The PostgreSQL store's pool reconnects on a bounded schedule, and says so without flooding
the log (the outage itself is measured in tests/runtime/test_outage_recovery.py)."""

from __future__ import annotations

import logging

from taskfuse.store.postgres import _RECONNECT_MAX_S, _QuietReconnects, _Reconnect


def test_a_connection_is_retried_at_least_every_half_second_and_never_given_up() -> None:
    attempt = _Reconnect()
    delays = []
    for second in range(400):  # an outage of minutes
        attempt.update_delay(float(second))
        delays.append(attempt.delay)
        assert not attempt.time_to_give_up(float(second))
    assert delays[:5] == [0.05, 0.1, 0.2, 0.4, 0.5]
    assert max(delays) == _RECONNECT_MAX_S == 0.5


def _failed(pool: str) -> logging.LogRecord:
    return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1,
                             "error connecting in %r: %s", (pool, "connection refused"), None)


def test_failed_reconnections_of_a_pool_are_logged_once_per_ten_seconds() -> None:
    quiet = _QuietReconnects()
    assert [quiet.filter(_failed("taskfuse:a")) for _ in range(20)] == [True] + [False] * 19
    assert quiet.filter(_failed("taskfuse:b"))  # another pool: its own first line
    assert quiet.filter(_failed("someone-elses-pool"))  # not ours: untouched
