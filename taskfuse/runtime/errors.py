"""Errors a task function raises, and how any exception becomes an `Outcome` for the core.

The core decides retry or fail from an error *kind* (a string), so the runtime's only job is
to name the kind: users classify with `TaskError("http_429", ...)`; a few standard
exceptions have a standard kind; anything else is named by its class, which the retry
policy treats as unknown (retryable by default, `RetryPolicy.unknown_retryable`).
"""

from __future__ import annotations

import logging
from typing import Any

from taskfuse.core.retry import ErrorKind
from taskfuse.core.states import TaskfuseError
from taskfuse.core.task import Outcome

#: Longest error message stored with a task; a traceback belongs in the logs, not the record.
MAX_ERROR_MSG = 2000

#: Kinds the runtime itself produces for mistakes no retry can fix.
UNKNOWN_KIND = "unknown_kind"
BAD_CONFIG = "bad_config"
RESULT_ERROR = "result_error"  # the store could not keep what the task returned
#: The process executor could not move a payload to the task's process, or its result back.
PAYLOAD_UNSERIALIZABLE = "payload_unserializable"
RESULT_UNSERIALIZABLE = "result_unserializable"
#: BaseExceptions a task raises that are no error of its work: argparse or click code calling
#: sys.exit(), a stray KeyboardInterrupt, a generator's close. Left alone they would end the
#: thread (or task process) that ran the task; instead the attempt fails for good, named by
#: the exception, and the thread goes on serving.
TASK_EXITS: frozenset[str] = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit"})
RUNTIME_FATAL: frozenset[str] = frozenset(
    {UNKNOWN_KIND, BAD_CONFIG, RESULT_ERROR, PAYLOAD_UNSERIALIZABLE, RESULT_UNSERIALIZABLE}
) | TASK_EXITS
#: The task's process ended before it answered (a crash, an OOM kill): retryable, like any
#: unknown kind, because the next attempt may well fit.
PROCESS_DIED = "process_died"


class RuntimeConfigError(TaskfuseError):
    """Base of the runtime's own errors: registry and configuration mistakes."""


class UnknownKind(RuntimeConfigError):
    """No task function is registered for a kind."""

    def __init__(self, kind: str, known: list[str]) -> None:
        self.kind = kind
        self.known = known
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"no task function registered for kind {kind!r} (registered: {names})")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.kind, self.known)


class UnknownDownstream(RuntimeConfigError):
    """`ctx.downstream(name)` for a downstream the app never configured."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"downstream {name!r} is not configured (configured: {names})")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.name, self.known)


class TaskError(Exception):
    """Raise from a task function to classify its failure: `TaskError("http_429", "slow down")`.

    The kind decides retry or fail through the retry policy (`http_429` retries,
    `bad_params` fails at once with the default policy). It and its subclasses here pickle
    with their own arguments, so they cross to a task process and back unchanged.
    """

    def __init__(self, kind: str, message: str = "") -> None:
        self.kind = str(kind)
        self.message = message
        super().__init__(f"{kind}: {message}" if message else kind)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.kind, self.message)


class DownstreamRejected(TaskError):
    """The downstream's circuit breaker refused the call; the task goes back to PENDING
    without using an attempt (the core's DEFER) and is held back until the breaker reopens."""

    def __init__(self, name: str, retry_at: float | None) -> None:
        self.downstream = name
        self.retry_at = retry_at
        super().__init__(ErrorKind.BREAKER_OPEN, f"circuit breaker of {name!r} is open")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.downstream, self.retry_at)


class TaskCanceled(TaskError):
    """The attempt was told to stop (canceled, timed out, released at shutdown).

    The record has already moved on, so the outcome this produces loses the version check
    and is discarded; raising it just unwinds the task function quickly.
    """

    def __init__(self, message: str = "task canceled") -> None:
        super().__init__(ErrorKind.CANCELED, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message,)


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
    if not isinstance(exc, Exception):  # SystemExit(2) says only "2": name the exception
        return Outcome.failure(type(exc).__name__, _clip(f"the task raised {exc!r}"))
    return Outcome.failure(type(exc).__name__, _clip(str(exc)))


def attempt_failure(logger: logging.LoggerAdapter[Any] | logging.Logger,
                    exc: BaseException) -> Outcome:
    """The outcome of an attempt that raised, logged as every executor logs it: a TaskError
    (the task classified its failure) in one line, a BaseException (`TASK_EXITS`) as an
    error, anything else with its traceback."""
    if isinstance(exc, TaskError):
        logger.info("attempt failed: %s", exc)
    elif not isinstance(exc, Exception):
        logger.error("attempt failed: the task raised %r, which would have ended the thread "
                     "running it; the task fails and the thread goes on", exc, exc_info=exc)
    else:
        logger.warning("attempt failed: %r", exc, exc_info=exc)
    return outcome_of(exc)


def _clip(msg: str) -> str:
    return msg if len(msg) <= MAX_ERROR_MSG else msg[: MAX_ERROR_MSG - 3] + "..."
