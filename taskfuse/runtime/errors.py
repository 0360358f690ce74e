"""Errors a task function raises, and how any exception becomes an `Outcome` for the core.

The core decides retry or fail from an error *kind* (a string), so the runtime's only job is
to name the kind: users classify with `TaskError("http_429", ...)`; a few standard
exceptions have a standard kind; anything else is named by its class, which the retry
policy treats as unknown (retryable by default, `RetryPolicy.unknown_retryable`).
"""

from __future__ import annotations

from taskfuse.core.retry import ErrorKind
from taskfuse.core.states import TaskfuseError
from taskfuse.core.task import Outcome

#: Longest error message stored with a task; a traceback belongs in the logs, not the record.
MAX_ERROR_MSG = 2000

#: Kinds the runtime itself produces for mistakes no retry can fix.
UNKNOWN_KIND = "unknown_kind"
BAD_CONFIG = "bad_config"
RESULT_ERROR = "result_error"  # the store could not keep what the task returned
RUNTIME_FATAL: frozenset[str] = frozenset({UNKNOWN_KIND, BAD_CONFIG, RESULT_ERROR})


class RuntimeConfigError(TaskfuseError):
    """Base of the runtime's own errors: registry and configuration mistakes."""


class UnknownKind(RuntimeConfigError):
    """No task function is registered for a kind."""

    def __init__(self, kind: str, known: list[str]) -> None:
        self.kind = kind
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"no task function registered for kind {kind!r} (registered: {names})")


class UnknownDownstream(RuntimeConfigError):
    """`ctx.downstream(name)` for a downstream the app never configured."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"downstream {name!r} is not configured (configured: {names})")


class TaskError(Exception):
    """Raise from a task function to classify its failure: `TaskError("http_429", "slow down")`.

    The kind decides retry or fail through the retry policy (`http_429` retries,
    `bad_params` fails at once with the default policy).
    """

    def __init__(self, kind: str, message: str = "") -> None:
        self.kind = str(kind)
        self.message = message
        super().__init__(f"{kind}: {message}" if message else kind)


class DownstreamRejected(TaskError):
    """The downstream's circuit breaker refused the call; the task goes back to PENDING
    without using an attempt (the core's DEFER) and is held back until the breaker reopens."""

    def __init__(self, name: str, retry_at: float | None) -> None:
        self.downstream = name
        self.retry_at = retry_at
        super().__init__(ErrorKind.BREAKER_OPEN, f"circuit breaker of {name!r} is open")


class TaskCanceled(TaskError):
    """The attempt was told to stop (canceled, timed out, released at shutdown).

    The record has already moved on, so the outcome this produces loses the version check
    and is discarded; raising it just unwinds the task function quickly.
    """

    def __init__(self, message: str = "task canceled") -> None:
        super().__init__(ErrorKind.CANCELED, message)


def outcome_of(exc: BaseException) -> Outcome:
    """The failure `Outcome` an exception from a task function stands for."""
    if isinstance(exc, TaskError):
        return Outcome.failure(exc.kind, _clip(exc.message or str(exc)))
    if isinstance(exc, RuntimeConfigError):
        kind = UNKNOWN_KIND if isinstance(exc, UnknownKind) else BAD_CONFIG
        return Outcome.failure(kind, _clip(str(exc)))
    if isinstance(exc, TimeoutError):
        return Outcome.failure(ErrorKind.TIMEOUT, _clip(str(exc) or "timed out"))
    if isinstance(exc, ConnectionResetError):
        return Outcome.failure(ErrorKind.CONNECTION_RESET, _clip(str(exc) or "connection reset"))
    return Outcome.failure(type(exc).__name__, _clip(str(exc)))


def _clip(msg: str) -> str:
    return msg if len(msg) <= MAX_ERROR_MSG else msg[: MAX_ERROR_MSG - 3] + "..."
