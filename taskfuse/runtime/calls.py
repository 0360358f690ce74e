"""`ctx.downstream(name).call(fn, ...)`: one logical call with the client's whole policy.

Task code keeps only the call; the limits say the rest, and this loop applies it exactly as
the simulator's client does (lab/simulate/client.py), in the same order:

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
`Waits`, so a test can drive the very same loop on a fake clock. A task process runs the
same loop (`run_call`) with its `fn` at home and the client's state and the fuses asked of
the worker over the pipe (`CallSide`), so a process task and a thread task share one budget,
one jitter stream and one set of fuses per downstream.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from taskfuse.core.retry import ErrorKind, RetryPolicy, RetryThrottle
from taskfuse.limits.build import call_retry
from taskfuse.limits.schema import ClientLimits
from taskfuse.runtime.errors import TaskCanceled, TaskError, outcome_of

if TYPE_CHECKING:
    from taskfuse.runtime.context import TaskContext
    from taskfuse.runtime.host import Host

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


class AttemptFailed(TaskError):
    """One failed attempt, raised inside the fuses so they record it with its kind."""

    def __init__(self, kind: str, cause: BaseException | None) -> None:
        super().__init__(kind, str(cause) if cause is not None else "")
        self.cause = cause


class CallClient:
    """One driver's client side of a downstream: timeout, retry policy, budget, jitter.

    The budget and the jitter stream are shared by every thread calling the downstream, so
    they are asked under `lock`. `retries` counts the retries the loop decided.
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

    def __repr__(self) -> str:
        return (f"CallClient({self.name!r}, timeout_s={self.timeout_s!r}, "
                f"max_retry={self.policy.max_retry})")


class CallSide(Protocol):
    """What the loop of one logical call asks of the driver it runs in.

    On a thread the answers are local (`context.ThreadSide`); in a task process the client's state
    (budget, jitter, counters) and the fuses stay in the worker, shared with thread tasks,
    and are asked over the pipe (taskfuse.runtime.procworker), while `fn` runs where the
    task runs. One loop (`run_call`) for both, so both keep the whole policy.
    """

    def begin(self) -> float | None:
        """Count the call's first attempt in the budget; answer the client's timeout."""
        ...

    def attempt(self, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any], timeout_s: float | None) -> Any:
        """One attempt through the fuses (`attempt_through`)."""
        ...

    def settle(self, retry: int, kind: str | None,
               previous: float | None) -> tuple[bool, float, str]:
        """Record the attempt's outcome (`kind` None: it succeeded); after a failure,
        answer (retry?, delay, why not)."""
        ...

    def pause(self, seconds: float) -> bool:
        """Back off `seconds`; True when the attempt was told to stop meanwhile."""
        ...


@dataclass(frozen=True, slots=True)
class Try:
    """The plan's answer: make one attempt now, with this client timeout."""

    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class Backoff:
    """The plan's answer: wait `seconds` (cut short by a stop), then ask again."""

    seconds: float


def call_plan(name: str, side: CallSide,
              kwargs: dict[str, Any]) -> Generator[Try | Backoff, AttemptFailed | None, None]:
    """The loop of the module doc as a plan both kinds of driver interpret: it yields `Try`
    (send back the attempt's failure, None for a success: then the plan ends) or `Backoff`
    (send None once waited). Every decision is here; a thread driver (`run_call`) and the
    event loop's (`taskfuse.runtime.aio`) only wait and run `fn`."""
    timeout_s = side.begin()
    if timeout_s is not None:
        kwargs.setdefault("timeout", timeout_s)
    retry = 0
    previous: float | None = None
    while True:
        error = yield Try(timeout_s)
        again, delay, why = side.settle(retry, None if error is None else error.kind, previous)
        if error is None:
            return
        if not again:
            raise CallFailed(error.kind, f"{name}: {why}") from error.cause
        retry += 1
        previous = delay
        if delay > 0:
            yield Backoff(delay)


def _after(plan: Generator[Try | Backoff, AttemptFailed | None, None],
           error: AttemptFailed | None) -> Try | Backoff | None:
    """The plan's next step once an attempt ended (`error` None: it succeeded); None when
    the call is done (a failure for good raises from the plan)."""
    try:
        return plan.send(error)
    except StopIteration:
        return None


def run_call(name: str, side: CallSide, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    """The plan (`call_plan`) on this thread; returns what `fn` returned, or raises."""
    plan = call_plan(name, side, kwargs)
    step = next(plan)
    while True:
        if isinstance(step, Backoff):
            if side.pause(step.seconds):
                raise TaskCanceled(f"stopped while backing off from downstream {name!r}")
            step = next(plan)
            continue
        try:
            result, error = side.attempt(fn, args, kwargs, step.timeout_s), None
        except AttemptFailed as failed:
            error = failed
        if (step := _after(plan, error)) is None:
            return result


def attempt_through(admit: AbstractContextManager[Any], clock: Callable[[], float],
                    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    timeout_s: float | None) -> Any:
    """`fn` inside the fuses' context manager `admit`; a failure leaves as AttemptFailed with its
    error kind, and an answer later than `timeout_s` (by `clock`) is a timeout."""
    with admit:
        began = clock()
        try:
            result = fn(*args, **kwargs)
        except TaskCanceled:
            raise
        except Exception as exc:
            raise AttemptFailed(error_kind(exc), exc) from exc
        _answered_in_time(clock() - began, timeout_s)
    return result


async def arun_call(name: str, side: Any, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    """The plan (`call_plan`) in a coroutine: `side.attempt` is awaited and a backoff is a
    loop timer, so a call waiting out a backoff holds no thread; a stop cancels the
    coroutine (CancelledError at its next await), which replaces the thread's stop check."""
    plan = call_plan(name, side, kwargs)
    step = next(plan)
    while True:
        if isinstance(step, Backoff):
            await asyncio.sleep(step.seconds)
            step = next(plan)
            continue
        try:
            result, error = await side.attempt(fn, args, kwargs, step.timeout_s), None
        except AttemptFailed as failed:
            error = failed
        if (step := _after(plan, error)) is None:
            return result


async def aattempt_through(admit: AbstractAsyncContextManager[Any],
                           clock: Callable[[], float], fn: Callable[..., Any],
                           args: tuple[Any, ...], kwargs: dict[str, Any],
                           timeout_s: float | None) -> Any:
    """`attempt_through` for a coroutine function `fn`, inside the fuses' async context."""
    async with admit:
        began = clock()
        try:
            result = await fn(*args, **kwargs)
        except TaskCanceled:
            raise
        except Exception as exc:
            raise AttemptFailed(error_kind(exc), exc) from exc
        _answered_in_time(clock() - began, timeout_s)
    return result


def _answered_in_time(took: float, timeout_s: float | None) -> None:
    """An answer later than the client's timeout is a timeout: the simulated client has
    given up on it by then."""
    if timeout_s is not None and took > timeout_s:
        raise AttemptFailed(_TIMEOUT, TimeoutError(f"answered after the client's timeout "
                                                   f"of {timeout_s:g}s"))


def client_of(runner: Host, name: str) -> CallClient:
    """The runner's client of downstream `name`; a guard added by hand has none of its own:
    the fuses, one attempt, no timeout."""
    client = runner.clients.get(name)
    return client if client is not None else CallClient(name, ClientLimits(),
                                                        random.Random(0))


def begin(runner: Host, client: CallClient) -> float | None:
    """`CallSide.begin` with the worker's client."""
    if client.budget is not None:
        with client.lock:
            client.budget.record_first(runner.clock())  # retries are charged when decided
    return client.timeout_s


def settle(runner: Host, client: CallClient, retry: int, kind: str | None,
           previous: float | None) -> tuple[bool, float, str]:
    """`CallSide.settle` with the worker's client: the budget sees the outcome, the policy
    decides, under the client's lock (budget and jitter are shared by every thread)."""
    budget = client.budget
    now = runner.clock()
    with client.lock:
        if budget is not None:
            budget.record_outcome(now, kind is None)
        if kind is None:
            return False, 0.0, ""
        decision = client.policy.decide(retry, kind, client.rng, previous, budget, now)
        if decision.retry:
            client.retries += 1
            return True, decision.delay, ""
    return False, 0.0, decision.reason


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
