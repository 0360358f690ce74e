"""Which store errors are an outage and which are an answer: the one classifier.

A store retries a call only through a *transient* error (the database or the road to it is
away for a while): it is then an outage, retried until the store's `retry_for` and reported
as `StoreUnavailable`. Everything else is *permanent* for that call (the same statement
would fail again the same way) and fails it at once with its reason as a `StoreError`: an
index entry too large (PostgreSQL's "index row size exceeds maximum" for a 4 kB idempotency
key, which was retried for 60 s as a broken connection and then reported "unavailable"), a
constraint violation, bad data, a syntax or permission error.

PostgreSQL says which it is in the error's SQLSTATE (Appendix A of its manual); an error
with none was raised by the client for a connection it lost or could not get.
"""

from __future__ import annotations

import sqlite3

#: SQLSTATE classes of a passing condition: connection exception (08), insufficient
#: resources (53: too many connections, out of memory, disk full), operator intervention
#: (57: shutdown, restart, cannot connect now; not 57014, a statement timeout), system
#: error (58: I/O), and the transaction rollbacks a retry resolves (40001 serialization,
#: 40P01 deadlock), a lock not available (55P03).
_TRANSIENT_CLASSES = ("08", "53", "58")
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "40001", "40P01",
                               "55P03", "55006"})
#: SQLite's own words for a database another connection holds for now.
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "database is busy")


def transient(exc: BaseException) -> bool:
    """Whether `exc` is an outage worth retrying (else the call fails with its reason)."""
    if isinstance(exc, sqlite3.Error):
        return isinstance(exc, sqlite3.OperationalError) and any(
            words in str(exc) for words in _SQLITE_TRANSIENT)
    state = getattr(exc, "sqlstate", None)
    if state is None:  # psycopg: no answer from a server (a lost connection, a pool timeout)
        return type(exc).__module__.split(".")[0] in ("psycopg", "psycopg_pool") \
            and _is_operational(exc)
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


def _is_operational(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError)
