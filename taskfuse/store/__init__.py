"""Stores: where tasks live. `open_store(url)` picks one from a URL.

* ``memory://`` — in process memory (the lab's default, tests);
* ``sqlite:///path/to/file.db`` — the embedded default for real runs;
* ``postgresql://user@host:port/db`` — many processes on many machines.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from taskfuse.core.states import TaskfuseError
from taskfuse.core.storeapi import Store


class StoreURLError(TaskfuseError):
    """A store URL that names no store we have, or cannot be opened."""


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


def open_store(url: str) -> Store:
    """Open the store a URL names; raises StoreURLError with the URL redacted."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from taskfuse.store.memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        from taskfuse.store.sqlite import SQLiteStore  # type: ignore[import-not-found]

        return SQLiteStore.from_url(url)
    if scheme in ("postgresql", "postgres"):
        from taskfuse.store.postgres import PostgresStore  # type: ignore[import-not-found]

        return PostgresStore.from_url(url)
    raise StoreURLError(
        f"unknown store URL scheme {scheme!r} in {redact_url(url)!r}: expected memory://, "
        "sqlite:///PATH or postgresql://..."
    )
