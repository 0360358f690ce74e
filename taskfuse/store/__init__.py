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

from urllib.parse import urlsplit, urlunsplit

from taskfuse.core.states import TaskfuseError
from taskfuse.core.storeapi import Store
from taskfuse.store.memory import StoreError

__all__ = [
    "PayloadError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailable",
    "open_store",
    "redact_url",
]


class StoreURLError(TaskfuseError):
    """A store URL that names no store we have, or cannot be opened."""


class PayloadError(StoreError):
    """A payload or result that cannot be stored as JSON; nothing was written.

    Raised before any write, so a submission either lands whole or not at all.
    """

    def __init__(self, task_id: str, what: str, cause: Exception) -> None:
        self.task_id = task_id
        self.what = what
        super().__init__(f"task {task_id!r}: {what} cannot be stored as JSON: {cause}")


class StoreUnavailable(StoreError):
    """The database could not be reached (or kept failing) for longer than the retry budget.

    The message names the store by its redacted URL: credentials never reach logs or traces.
    """


def redact_url(url: str) -> str:
    """The URL with any password replaced, safe for logs, traces and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def open_store(url: str, read_only: bool = False) -> Store:
    """Open the store a URL names; raises StoreURLError with the URL redacted.

    `read_only` (a watcher such as the fleet view): nothing is created or migrated, a store
    that does not exist is an error, and the connections cannot write.
    """
    scheme = urlsplit(url).scheme
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
