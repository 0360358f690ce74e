"""What a store raises: the errors every store shares, and the URL check that raises one.

Their own module, below the stores and the package's front (`taskfuse.store` re-exports
them), so that the stores and the SQL helpers import them without importing the front that
opens the stores: that was an import circle.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from taskfuse.core.states import TaskfuseError
from taskfuse.store.redaction import redact_url


class StoreError(TaskfuseError):
    """A store refused an operation (bad input, broken invariant of the caller)."""


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


class StoreFull(StoreError):
    """The store cannot grow: its disk, a file size limit or a page limit is reached.

    Nothing of the statement was written, and retrying cannot help until an operator frees
    room, so a worker says so once and does not retry it as an outage.
    """


def split_url(url: str) -> SplitResult:
    """A URL's parts; one that cannot be split (a malformed IPv6 host) is a StoreURLError."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise StoreURLError(f"bad store URL {redact_url(url)!r}: {exc}") from None
