"""TaskContext: what a running task function can know and ask, and the downstream fuses.

A task function is `fn(ctx, payload)`. Through `ctx` it learns who it is (task_id, trace_id,
attempt), whether to stop (`cancelled()`, `sleep()`), renews its lease (`heartbeat()`), logs
with its trace_id (`logger`), and calls guarded downstreams, sending the task's trace along
as a W3C `traceparent` header (`http_headers()`)::

    with ctx.downstream("partner"):      # breaker -> bulkhead -> token bucket, then the call
        response = session.get(url, headers=ctx.http_headers())

    ctx.downstream("partner").call(session.get, url)   # ... plus timeout and call retries
    with ctx.pool("batch"):                             # one turn of a connection-limited section
        ...

The context never decides anything: it asks the runner's Scheduler and guards (under the
runner's lock) and does the waiting itself, outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import QUEUED, Guard, Pace, Rejected
from taskfuse.core.task import Task
from taskfuse.observe import traceparent as w3c
from taskfuse.runtime import calls
from taskfuse.runtime.errors import (
    DownstreamRejected,
    TaskCanceled,
    UnknownDownstream,
    outcome_of,
)
from taskfuse.runtime.pools import PoolPermit
from taskfuse.store import StoreUnavailable, bounded

if TYPE_CHECKING:
    from taskfuse.runtime.fleet_limits import FleetLimits
    from taskfuse.runtime.host import Host
    from taskfuse.store.fleet_limits import Permit

#: The longest `ctx.cancelled()` waits for a store that does not answer.
CANCEL_CHECK_S = 1.0
#: Slack added to a task's deadline when waiting for a bulkhead permit, so the watchdog (which
#: stops the task) normally wins over the wait's own bound.
PERMIT_WAIT_SLACK_S = 1.0


class TaskLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger adapter that stamps trace_id, task_id, kind and attempt on every record.

    Unlike the stdlib adapter it keeps a caller's own `extra` keys too.
    """

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def task_logger(task: Task, worker_id: str | None = None) -> TaskLogger:
    """The logger of one attempt of `task` (logger name `taskfuse.task.KIND`)."""
    extra = {
        "trace_id": task.trace_id,
        "task_id": task.task_id,
        "kind": task.kind,
        "attempt": task.attempt,
        "worker": worker_id or task.worker_id,
    }
    return TaskLogger(logging.getLogger(f"taskfuse.task.{task.kind}"), extra)


class TaskContext:
    """The running attempt's view of itself; one per attempt, used by its thread only."""

    __slots__ = ("_event", "_logger", "_stopped", "host", "task")
    #: What `downstream()` and `pool()` make: an executor's context may await instead.
    _call_type: type[DownstreamCall]
    _permit_type: type[PoolPermit] = PoolPermit

    def __init__(self, task: Task, host: Host) -> None:
        self.task = task
        self.host = host
        # The stop signal: a flag, and an Event made only when someone sleeps on it (most
        # tasks never do, and an Event costs more to build than the rest of a claim).
        self._stopped = False
        self._event: threading.Event | None = None
        self._logger: TaskLogger | None = None

    def __repr__(self) -> str:
        return f"TaskContext(task_id={self.task_id!r}, kind={self.kind!r}, attempt={self.attempt})"

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def trace_id(self) -> str:
        return self.task.trace_id

    @property
    def kind(self) -> str:
        return self.task.kind

    @property
    def attempt(self) -> int:
        """1 for the first attempt, 2 for the first retry, ..."""
        return self.task.attempt

    @property
    def payload(self) -> Any:
        return self.task.payload

    @property
    def batch_id(self) -> str | None:
        return self.task.batch_id

    @property
    def deadline(self) -> float:
        """Wall-clock time (time.time()) after which the watchdog times this attempt out."""
        return self.task.deadline or time.time()

    @property
    def logger(self) -> TaskLogger:
        """A logger whose records carry trace_id and task_id (JSON via runtime.logs)."""
        if self._logger is None:
            self._logger = task_logger(self.task)
        return self._logger

    def traceparent(self) -> str:
        """A W3C `traceparent` value for one outgoing call: this task's trace, a new span.

        The 16-hex trace_id is widened to W3C's 32 hex deterministically (see
        `taskfuse.observe.traceparent`), so the downstream's logs and ours join on it.
        """
        return w3c.traceparent(self.task.trace_id)

    def http_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Headers for one outgoing HTTP call: `extra` plus a fresh `traceparent`."""
        return w3c.headers(self.task.trace_id, extra)

    def cancelled(self) -> bool:
        """Whether this attempt should stop: its record moved on without it.

        True after a cancel (from any process), a timeout, a release at shutdown, or when
        the sweeper took the task away. Reads the store, so call it between units of work.
        While the store does not answer (an outage), the answer is what this process knows
        after at most CANCEL_CHECK_S: a task keeps working rather than hang in the check.
        """
        if self._stopped:
            return True
        runner = self.host
        try:
            with bounded(runner.store, CANCEL_CHECK_S):
                gone = runner.scheduler.is_cancelled(self.task)
        except StoreUnavailable:
            return self._stopped
        if gone:
            with runner.lock:
                self.signal_stop()
        return gone

    def signal_stop(self) -> None:
        """Tell this attempt to stop (runner lock held): wakes `sleep` and permit waits."""
        self._stopped = True
        if self._event is not None:
            self._event.set()

    @property
    def stopped(self) -> bool:
        """Whether this attempt has been told to stop (without asking the store)."""
        return self._stopped

    def set_stop_event(self, event: threading.Event) -> None:
        """Use `event` as this attempt's stop signal (set at once if already stopped).

        For an executor that waits on something other than `sleep`: the process executor
        waits on its child's pipe and passes an Event whose `set` also wakes that wait.
        """
        with self.host.lock:
            self._event = event
            if self._stopped:
                event.set()

    def wait_stop(self, seconds: float) -> bool:
        """Wait up to `seconds` for a stop signal; True if one came."""
        with self.host.lock:
            if self._stopped:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise TaskCanceled when `cancelled()`: unwinds the task; its result is void anyway."""
        if self.cancelled():
            raise TaskCanceled(f"task {self.task_id} was canceled or timed out")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking early when told to stop; True means stop now."""
        return self.wait_stop(seconds) or self.cancelled()

    def heartbeat(self) -> bool:
        """Renew this attempt's lease now; False means the task is no longer ours (stop).

        The runner already renews leases of running tasks on a timer; call this inside a long
        step that must not be mistaken for a dead worker.
        """
        runner = self.host
        with runner.store_lock():
            ok = runner.scheduler.heartbeat(self.task, runner.clock())
        if not ok:
            with runner.lock:
                self.signal_stop()
        return ok

    def downstream(self, name: str) -> DownstreamCall:
        """Downstream `name`: `.call(fn, ...)` with the client's whole policy (timeout,
        retries, budget: taskfuse.runtime.calls), or a context manager of its fuses only."""
        guard = self.host.scheduler.guards.get(name)
        if guard is None:
            raise UnknownDownstream(name, list(self.host.scheduler.guards))
        return self._call_type(self, guard)

    def pool(self, name: str) -> PoolPermit:
        """A context manager holding one permit of pool section `name` (runtime.pools)."""
        return self._permit_type(self, name)


class _Permit:
    """A bulkhead waiter: identity for the FIFO queue, an Event made only if it must wait."""

    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event: threading.Event | None = None
        self.granted = False


class DownstreamCall:
    """Admit (breaker -> bulkhead -> token bucket), run the body, record outcome and latency.

    The core answers; this class only waits: a Pace by sleeping, a QUEUED by waiting on an
    Event that the releasing call sets (it is handed the permit directly), a Rejected by
    raising DownstreamRejected, which defers the task without using an attempt.
    """

    __slots__ = ("_ctx", "_fleet", "_fleet_permit", "_guard", "_permit", "_start")

    def __init__(self, ctx: TaskContext, guard: Guard) -> None:
        self._ctx = ctx
        self._guard = guard
        self._permit = _Permit()
        self._start = 0.0
        self._fleet: FleetLimits | None = ctx.host.fleet.get(guard.name)
        self._fleet_permit: Permit | None = None

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` as one logical call: timeout, retries, budget and the fuses
        of every attempt, as the simulator's client applies them (taskfuse.runtime.calls)."""
        side = ThreadSide(self._ctx, self._guard)
        return calls.run_call(self._guard.name, side, fn, args, kwargs)

    def __enter__(self) -> DownstreamCall:
        runner, guard, permit = self._ctx.host, self._guard, self._permit
        if self._ctx.stopped:  # a stopped (e.g. stale) attempt takes no permit, makes no call
            raise TaskCanceled(f"stopped before calling downstream {guard.name!r}")
        with runner.lock:
            answer = guard.admit(permit, runner.clock())
            if answer is QUEUED:
                permit.event = threading.Event()
                runner.permit_waiting(self._ctx.task, permit)
        if isinstance(answer, Rejected):
            raise DownstreamRejected(guard.name, answer.retry_at)
        if answer is QUEUED:
            answer = self._wait_for_permit()
        if isinstance(answer, Pace):
            self._pace(answer.wait)
        if self._fleet is not None:
            try:
                self._enter_fleet(self._fleet)
            except BaseException:
                self._release_fleet()
                with runner.lock:
                    self._give_back(queued=False)
                raise
        self._start = runner.waits.now()
        return self

    def _enter_fleet(self, fleet: FleetLimits) -> None:
        """After the process-local admission: the fleet permit, then the fleet's pacing.

        Waiting is the store's (woken by a release in any process), bounded like a local
        permit wait by the task's deadline, and cut short by a stop.
        """
        ctx, runner = self._ctx, self._ctx.host
        if fleet.bulkhead is not None:
            holder = f"{runner.worker_id}/{ctx.task_id}@{ctx.task.version}"  # the attempt
            self._fleet_permit = fleet.try_acquire(holder)
            if self._fleet_permit is None:
                began = time.monotonic()
                bound = max(0.0, ctx.deadline - runner.clock()) + PERMIT_WAIT_SLACK_S
                self._fleet_permit = fleet.acquire(holder, began + bound, lambda: ctx.stopped)
                if self._fleet_permit is None:
                    self._no_permit()
                with runner.lock:
                    runner.emit_wait(ctx.task, self._guard.name, time.monotonic() - began,
                                     runner.clock())
        wait = fleet.reserve()
        if wait > 0 and ctx.wait_stop(wait):
            raise TaskCanceled(f"stopped while pacing for downstream {self._guard.name!r}")

    def _no_permit(self) -> None:
        name = self._guard.name
        if self._ctx.stopped:
            raise TaskCanceled(f"stopped while waiting for fleet downstream {name!r}")
        raise TimeoutError(f"no fleet permit for downstream {name!r} before the deadline")

    def _release_fleet(self) -> None:
        """Give the fleet permit back (outside the runner lock: it is a database call).

        A failure is only logged: the lease lapses on its own, so the permit is not leaked.
        """
        permit, self._fleet_permit = self._fleet_permit, None
        if permit is None or self._fleet is None:
            return
        try:
            self._fleet.release(permit)
        except Exception:
            self._ctx.logger.warning("could not release a fleet permit of %r; it will lapse",
                                     self._guard.name, exc_info=True)

    def _wait_for_permit(self) -> Any:
        ctx, runner, permit = self._ctx, self._ctx.host, self._permit
        began = time.monotonic()
        bound = max(0.0, ctx.deadline - runner.clock()) + PERMIT_WAIT_SLACK_S
        assert permit.event is not None
        permit.event.wait(bound)
        return self._after_wait(began)

    def _after_wait(self, began: float) -> Any:
        """After a queued permit's wait ended (granted, stopped or out of time): the
        admission's next answer, or the permit given back and TaskCanceled / TimeoutError."""
        ctx, runner, permit = self._ctx, self._ctx.host, self._permit
        with runner.lock:
            runner.permit_done(ctx.task)
            if not permit.granted:
                self._give_back(queued=True)
                stopped = ctx.stopped
            elif ctx.stopped:
                self._give_back(queued=False)
                stopped = True
            else:
                now = runner.clock()
                runner.emit_wait(ctx.task, self._guard.name, time.monotonic() - began, now)
                return self._guard.resume(now)
        if stopped:
            raise TaskCanceled(f"stopped while waiting for downstream {self._guard.name!r}")
        raise TimeoutError(f"no permit for downstream {self._guard.name!r} before the deadline")

    def _pace(self, wait: float) -> None:
        ctx = self._ctx
        if ctx.host.waits.pause(ctx, wait):
            with ctx.host.lock:
                self._give_back(queued=False)
            raise TaskCanceled(f"stopped while pacing for downstream {self._guard.name!r}")

    def _give_back(self, queued: bool) -> None:
        """Return an unused permit (under the runner lock); wake whoever it goes to."""
        woken = self._guard.abandon(self._permit, queued)
        if woken is not None:
            self._ctx.host.grant([woken])

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish(None if exc_type is None else call_error_kind(exc))

    def finish(self, error_kind: str | None, latency: float | None = None) -> None:
        """Release what the call holds and record it: `error_kind` None for a success.

        `latency` is measured here unless given: a call made from a task process is
        admitted here but timed there, so the fuses see the call, not the pipe.
        """
        runner = self._ctx.host
        if latency is None:
            latency = runner.waits.now() - self._start
        ok = error_kind is None
        self._release_fleet()
        with runner.lock:
            now = runner.clock()
            breaker = self._guard.breaker
            before = breaker.state(now) if breaker is not None else None
            runner.grant(self._guard.record(now, ok, latency))
            if breaker is not None and breaker.state(now) is not before:
                runner.work_changed()
        # After the fuse lock, under the emit lock alone: the sinks (trace file, metrics)
        # are I/O, and with hundreds of calls a second every thread's admission and record
        # queued behind them.
        runner.emit(Event(now, EventKind.CALL, self._ctx.task_id, self._ctx.task.batch_id,
                          self._ctx.trace_id, None, None, error_kind or "ok",
                          self._ctx.attempt, None, self._guard.name, latency))


class ThreadSide:
    """`CallSide` of a task on a worker thread: everything local."""

    __slots__ = ("_client", "_ctx", "_guard")

    def __init__(self, ctx: TaskContext, guard: Guard) -> None:
        self._ctx = ctx
        self._guard = guard
        self._client = calls.client_of(ctx.host, guard.name)

    def begin(self) -> float | None:
        return calls.begin(self._ctx.host, self._client)

    def attempt(self, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any], timeout_s: float | None) -> Any:
        return calls.attempt_through(DownstreamCall(self._ctx, self._guard),
                                     self._ctx.host.waits.now, fn, args, kwargs, timeout_s)

    def settle(self, retry: int, kind: str | None,
               previous: float | None) -> tuple[bool, float, str]:
        return calls.settle(self._ctx.host, self._client, retry, kind, previous)

    def pause(self, seconds: float) -> bool:
        return self._ctx.host.waits.pause(self._ctx, seconds)


def call_error_kind(exc: BaseException | None) -> str:
    """The error kind of a failed call, named as the task's outcome would name it
    (ConnectionResetError -> connection_reset), so call errors and retries agree."""
    if exc is None:
        return "error"
    return outcome_of(exc).error_kind or type(exc).__name__


TaskContext._call_type = DownstreamCall
