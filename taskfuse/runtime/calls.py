"""`ctx.downstream(name).call(fn, ...)`: one logical call with the client's whole policy.

Task code keeps only the call; the limits say the rest, and this loop applies it exactly as
the simulator's client does (lab/calls.py), in the same order:

1. on a first attempt, the per-call retry budget counts it (`record_first`);
2. the downstream's fuses admit the attempt (breaker -> bulkhead -> token bucket, the
   `with ctx.downstream(name)` machinery): a refusal by an open breaker is raised at once
   (DownstreamRejected: the task goes back to PENDING without using an attempt);
3. `fn(*args, timeout=timeout_s, **kwargs)` runs, when the client has a timeout (requests
   and httpx both take `timeout=`); an attempt that took longer than `timeout_s` is a
   `timeout`, even if it returned at last, as the simulated client has given up by then;
4. the fuses record the outcome and latency, then the budget (`record_outcome`);
5. a failure is classified (`error_kind`) and the client's RetryPolicy decides: retry after
   a backoff (the budget is charged by that decision) or give up with a TaskError of the
   last kind, which the task's own retry policy then judges.

Each driver has one `CallClient` per downstream: the policy, its budget and a seeded jitter
stream (`App.call_clients`). Waiting (pacing, backoff) and measuring go through the runner's
`Waits`, so a test can drive the very same loop on a fake clock.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from taskfuse.core.retry import ErrorKind, RetryPolicy, RetryThrottle
from taskfuse.limits.build import call_retry
from taskfuse.limits.schema import ClientLimits
from taskfuse.runtime.errors import DownstreamRejected, TaskCanceled, TaskError, outcome_of

if TYPE_CHECKING:
    from taskfuse.core.guard import Guard
    from taskfuse.runtime.context import TaskContext

_TIMEOUT = ErrorKind.TIMEOUT.value


class Waits(Protocol):
    """How the runtime's call path measures durations and waits (a seam for fake clocks)."""

    def now(self) -> float:
        """Seconds on a monotonic clock, for latencies."""
        ...

    def pause(self, ctx: TaskContext, seconds: float) -> bool:
        """Wait `seconds` (pacing, backoff); True when the attempt was told to stop."""
        ...


class RealWaits:
    """Real time: time.monotonic, and waits cut short by the attempt's stop signal."""

    def now(self) -> float:
        return time.monotonic()

    def pause(self, ctx: TaskContext, seconds: float) -> bool:
        return ctx.wait_stop(seconds)


REAL_WAITS = RealWaits()


class CallFailed(TaskError):
    """A call that failed for good: its last error kind, and the retry policy's reason."""


class _Attempt(TaskError):
    """One failed attempt, raised inside the fuses so they record it with its kind."""

    def __init__(self, kind: str, cause: BaseException | None) -> None:
        super().__init__(kind, str(cause) if cause is not None else "")
        self.cause = cause


class CallClient:
    """One driver's client side of a downstream: timeout, retry policy, budget, jitter.

    The budget and the jitter stream are shared by every thread calling the downstream, so
    they are asked under `lock`. `retries` and `rejected` count what the loop decided.
    """

    def __init__(self, name: str, client: ClientLimits, rng: random.Random) -> None:
        self.name = name
        self.timeout_s = client.timeout_s
        self.policy: RetryPolicy
        self.budget: RetryThrottle | None
        self.policy, self.budget = call_retry(client)
        self.rng = rng
        self.lock = threading.Lock()
        self.retries = 0
        self.rejected = 0

    def __repr__(self) -> str:
        return (f"CallClient({self.name!r}, timeout_s={self.timeout_s!r}, "
                f"max_retry={self.policy.max_retry})")


def call(ctx: TaskContext, guard: Guard, fn: Callable[..., Any], args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> Any:
    """The loop of the module doc; returns what `fn` returned, or raises."""
    runner = ctx._runner
    client = runner.clients.get(guard.name)
    if client is None:  # a guard added by hand: the fuses, one attempt, no timeout
        client = CallClient(guard.name, ClientLimits(), random.Random(0))
    if client.timeout_s is not None:
        kwargs.setdefault("timeout", client.timeout_s)
    budget = client.budget
    retry = 0
    previous: float | None = None
    while True:
        if budget is not None and retry == 0:
            with client.lock:
                budget.record_first(runner.clock())  # retries are charged when decided
        try:
            result, error = _attempt(ctx, guard, client, fn, args, kwargs), None
        except _Attempt as failed:
            error = failed
        except DownstreamRejected:
            with client.lock:
                client.rejected += 1
            raise
        now = runner.clock()
        with client.lock:
            if budget is not None:
                budget.record_outcome(now, error is None)
            if error is None:
                return result
            decision = client.policy.decide(retry, error.kind, client.rng, previous, budget,
                                            now)
            if decision.retry:
                client.retries += 1
        if not decision.retry:
            raise CallFailed(error.kind, f"{guard.name}: {decision.reason}") from error.cause
        retry += 1
        previous = decision.delay
        if decision.delay > 0 and runner.waits.pause(ctx, decision.delay):
            raise TaskCanceled(f"stopped while backing off from downstream {guard.name!r}")


def _attempt(ctx: TaskContext, guard: Guard, client: CallClient, fn: Callable[..., Any],
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One attempt through the fuses; a failure leaves as _Attempt with its error kind."""
    from taskfuse.runtime.context import DownstreamCall

    waits = ctx._runner.waits
    with DownstreamCall(ctx, guard):
        began = waits.now()
        try:
            result = fn(*args, **kwargs)
        except TaskCanceled:
            raise
        except Exception as exc:
            raise _Attempt(error_kind(exc), exc) from exc
        timeout = client.timeout_s
        if timeout is not None and waits.now() - began > timeout:
            raise _Attempt(_TIMEOUT, TimeoutError(f"answered after the client's timeout "
                                                  f"of {timeout:g}s"))
    return result


def error_kind(exc: BaseException) -> str:
    """The error kind of a failed call, as the retry policies name kinds.

    A TaskError names its own; a timeout of any HTTP client (TimeoutError, httpx's and
    requests' *Timeout classes) is `timeout`; an error carrying an HTTP response with a
    status (`raise_for_status()` in httpx and requests) is `http_<status>`; the rest as a
    task's failure would be named (ConnectionResetError -> connection_reset, else the class).
    """
    if isinstance(exc, TaskError):
        return exc.kind
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return _TIMEOUT
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return f"http_{status}"
    return outcome_of(exc).error_kind or type(exc).__name__
