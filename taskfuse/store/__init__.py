"""Stores: where tasks live. `open_store(url)` picks one from a URL.

* ``memory://`` — in process memory (the lab's default, tests);
* ``sqlite:///relative/file.db`` or ``sqlite:////absolute/file.db`` — the embedded default
  for real runs (options: ``?synchronous=NORMAL``, ``busy_timeout=SECONDS``);
* ``postgresql://user@host:port/db`` — many processes on many machines (options:
  ``?schema=NAME``, ``pool_min``, ``pool_max``, ``retry_for=SECONDS``; any other parameter
  goes to libpq).

The durable stores are safe to share between threads; open one per process (after a fork,
not before). Both have ``close()`` and ``wait_for_work(timeout)`` (block until new work may
be claimable), and ``swap_many`` (several compare-and-sets in one commit).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from taskfuse.core.storeapi import Store
from taskfuse.store.failures import (
    PayloadError,
    StoreError,
    StoreFull,
    StoreUnavailable,
    StoreURLError,
    split_url,
)
from taskfuse.store.redaction import describe_error, redact_text, redact_url, remember

__all__ = [
    "PayloadError",
    "StoreError",
    "StoreFull",
    "StoreURLError",
    "StoreUnavailable",
    "bounded",
    "describe_error",
    "open_store",
    "redact_text",
    "redact_url",
    "split_url",
]


@contextmanager
def bounded(store: Any, seconds: float) -> Iterator[None]:
    """Calls of this thread to `store` give up after `seconds` (StoreUnavailable) instead of
    retrying for the store's whole retry budget: for a shutdown that must end within its
    grace while the database is down. A store with nothing to retry is unaffected."""
    inner = getattr(store, "inner", store)  # a LockedStore's store
    limit = getattr(inner, "retries_within", None)
    with limit(seconds) if callable(limit) else nullcontext():
        yield


def open_store(url: str, read_only: bool = False) -> Store:
    """Open the store a URL names; raises StoreURLError with the URL redacted.

    The URL's secrets are remembered first, so no later output of this process (an error
    that quotes a piece of the password, a log line) shows them (store/redaction.py).
    `read_only` (a watcher such as the fleet view): nothing is created or migrated, a store
    that does not exist is an error, and the connections cannot write.
    """
    remember(url)
    scheme = split_url(url).scheme
    if scheme == "memory":
        from taskfuse.store.memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        from taskfuse.store.sqlite import SQLiteStore

        return SQLiteStore.from_url(url, read_only=read_only)
    if scheme in ("postgresql", "postgres"):
        from taskfuse.store.postgres import PostgresStore

        return PostgresStore.from_url(url, read_only=read_only)
    raise StoreURLError(
        f"unknown store URL scheme {scheme!r} in {redact_url(url)!r}: expected memory://, "
        "sqlite:///PATH or postgresql://..."
    )
