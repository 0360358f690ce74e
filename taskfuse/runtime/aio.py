"""The async executor: `async def` tasks as coroutines on one event loop per worker process.

Theory of operation
-------------------
A thread per task in flight stops paying past about a thousand threads: the process spends
its CPU switching them. A task that mostly waits on a partner needs no thread while it
waits, so kinds of `executor: async` run as coroutines on one event loop thread, fed by the
same claimer and completer as the worker threads (claims in groups, group commit):

* the claimer hands claimed attempts over in one `loop.call_soon_threadsafe` per group
  (`AsyncExecutor.submit`); how many it claims for the loop is bounded by the worker's
  `async_concurrency` and the kinds' own caps (`LoopRoom`), and a kind at its cap keeps
  its claimed attempts in its own FIFO until one of its coroutines ends;
* each attempt is an `asyncio.Task` running `fn(ctx, payload)`; the outcomes that
  ended in one turn of the loop go to the completer together (`LoopFeed.finished`);
* a stop (cancel, watchdog timeout, lost lease, shutdown) is `Task.cancel()`: the coroutine
  sees CancelledError at its next await, and its slot is free as soon as it unwinds. The
  version check discards whatever it reports late, as for threads;
* inside a task, a bulkhead permit or a pool's turn is a future the fuse gate resolves
  (`LoopSignal`: `grant` from any thread calls `set`, which resolves it on the loop), and a
  token bucket's pace or a call's backoff is a loop timer: a waiting coroutine holds no thread.
  The decisions are the thread path's own objects: the same guards under the same fuse lock,
  the same call plan (`calls.call_plan`), the same clients;
* a coroutine that blocks the loop (a sync call, CPU) delays every other one: a watcher
  thread pings the loop every `LAG_EVERY_S`; a ping late by more than `LAG_BLOCKED_S` names
  the task on the loop at that moment in a log line, and each lag of at least
  `LAG_REPORT_S` is a WAIT event (reason `loop_lag`, subject `event_loop`) for the trace and
  the monitor. `lag_s` / `lag_max_s` are the metric.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import QUEUED, Pace, Rejected
from taskfuse.core.retry import ErrorKind
from taskfuse.core.task import Outcome
from taskfuse.runtime.calls import aattempt_through, arun_call
from taskfuse.runtime.context import (
    PERMIT_WAIT_SLACK_S,
    DownstreamCall,
    TaskContext,
    ThreadSide,
    call_error_kind,
)
from taskfuse.runtime.errors import (
    DownstreamRejected,
    TaskCanceled,
    attempt_failure,
)
from taskfuse.runtime.pools import PoolPermit, Ticket

if TYPE_CHECKING:
    from taskfuse.core.task import Task
    from taskfuse.runtime.host import Host

log = logging.getLogger("taskfuse.runtime")

#: How often the watcher pings the loop, how late a ping is a blocked loop worth naming the
#: task for, and the smallest lag reported as an event.
LAG_EVERY_S = 0.25
LAG_BLOCKED_S = 0.1
LAG_REPORT_S = 0.05
#: The outcome of a coroutine canceled by its stop (its record has moved on already).
CANCELED_AT_AWAIT = "canceled at an await (cancel, timeout, lost lease or shutdown)"


class LoopSignal:
    """A waiter's wake-up on the loop: `set()` from any thread resolves a future there.

    It stands where a thread's `threading.Event` stands in a bulkhead permit or a pool
    ticket, so the fuse gate's `grant` and a stop wake a coroutine the same way.
    """

    __slots__ = ("_fut", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fut: asyncio.Future[None] = loop.create_future()

    def set(self) -> None:
        self._loop.call_soon_threadsafe(_resolve, self._fut)

    async def wait(self, timeout: float) -> None:
        """Until set or `timeout` passed (no error either way; the caller looks why)."""
        await asyncio.wait((self._fut,), timeout=timeout)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class AsyncTaskContext(TaskContext):
    """The context of a coroutine attempt: the thread context's reads, with waits that
    await. A stop cancels the coroutine (`signal_stop`), so `cancelled()` need not ask the
    store: a cancel from another process reaches this worker through its heartbeat."""

    __slots__ = ("_aio", "_loop")

    def __init__(self, task: Task, host: Host, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(task, host)
        self._loop = loop
        self._aio: asyncio.Task[None] | None = None

    def attach(self, aio: asyncio.Task[None]) -> None:
        """The asyncio Task running this attempt (on the loop); cancel it if already told."""
        # No lock (the fuse lock would stall the loop behind a memory store's group commit):
        # this writes _aio then reads _stopped, signal_stop writes _stopped then reads
        # _aio, so under the interpreter's ordering one of the two sees the other and
        # cancels (both may: a second cancel is harmless).
        self._aio = aio
        if self._stopped:
            aio.cancel()

    def signal_stop(self) -> None:
        """Tell the attempt to stop (fuse lock held): cancel its coroutine."""
        super().signal_stop()
        if self._aio is not None:
            self._loop.call_soon_threadsafe(self._aio.cancel)

    def cancelled(self) -> bool:
        """Whether this attempt was told to stop (no store read: it would block the loop)."""
        return self._stopped

    async def sleep(self, seconds: float) -> bool:  # type: ignore[override]
        """`await ctx.sleep(s)`: a stop cancels it (CancelledError) like any await."""
        await asyncio.sleep(seconds)
        return self._stopped

    async def heartbeat(self) -> bool:  # type: ignore[override]
        """Renew this attempt's lease now, the store call on a thread of the default pool."""
        return await asyncio.to_thread(super().heartbeat)

    # downstream(name): `await ctx.downstream(name).call(coro_fn, ...)`, or `async with`
    # its fuses; pool(name): `async with ctx.pool(name)` (the types set below).


class AsyncDownstreamCall(DownstreamCall):
    """The fuses of a downstream around an awaited call: admitted and recorded by the thread
    path's code (the same guard under the same lock), waiting by awaiting."""

    __slots__ = ()

    async def call(self, fn: Callable[..., Any], /, *args: Any,  # type: ignore[override]
                   **kwargs: Any) -> Any:
        """`await fn(*args, **kwargs)` as one logical call: timeout, retries, budget and
        the fuses of every attempt, decided by the thread path's plan (calls.call_plan)."""
        return await arun_call(self._guard.name, AsyncSide(self._ctx, self._guard), fn,
                               args, kwargs)

    async def __aenter__(self) -> AsyncDownstreamCall:
        ctx, host, guard, permit = self._ctx, self._ctx.host, self._guard, self._permit
        if ctx.stopped:
            raise TaskCanceled(f"stopped before calling downstream {guard.name!r}")
        with host.lock:
            answer = guard.admit(permit, host.clock())
            if answer is QUEUED:
                permit.event = LoopSignal(asyncio.get_running_loop())
                host.permit_waiting(ctx.task, permit)
        if isinstance(answer, Rejected):
            raise DownstreamRejected(guard.name, answer.retry_at)
        if answer is QUEUED:
            answer = await self._await_permit()
        if isinstance(answer, Pace):
            await self._await_pace(answer.wait)
        if self._fleet is not None:
            try:  # the fleet's permits are store rows: asked from a thread, not the loop
                await asyncio.to_thread(self._enter_fleet, self._fleet)
            except BaseException:
                await asyncio.to_thread(self._release_fleet)
                with host.lock:
                    self._give_back(queued=False)
                raise
        self._start = host.waits.now()
        return self

    async def _await_permit(self) -> Any:
        ctx, host, permit = self._ctx, self._ctx.host, self._permit
        began = time.monotonic()
        bound = max(0.0, ctx.deadline - host.clock()) + PERMIT_WAIT_SLACK_S
        try:
            await permit.event.wait(bound)  # type: ignore[union-attr]
        except asyncio.CancelledError:
            with host.lock:
                host.permit_done(ctx.task)
                self._give_back(queued=not permit.granted)
            raise
        return self._after_wait(began)

    async def _await_pace(self, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            with self._ctx.host.lock:
                self._give_back(queued=False)
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        kind = None if exc_type is None else _call_error_kind(exc)
        if self._fleet is not None:
            await asyncio.to_thread(self.finish, kind)
        else:
            self.finish(kind)


def _call_error_kind(exc: BaseException | None) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return ErrorKind.CANCELED.value
    return call_error_kind(exc)


class AsyncSide(ThreadSide):
    """`CallSide` of a coroutine: the thread side's budget and policy, awaited attempts."""

    __slots__ = ()

    async def attempt(self, fn: Callable[..., Any],  # type: ignore[override]
                      args: tuple[Any, ...], kwargs: dict[str, Any],
                      timeout_s: float | None) -> Any:
        return await aattempt_through(AsyncDownstreamCall(self._ctx, self._guard),
                                      self._ctx.host.waits.now, fn, args, kwargs, timeout_s)


class AsyncPoolPermit(PoolPermit):
    """`async with ctx.pool(name)`: the thread permit's bookkeeping, the wait awaited."""

    __slots__ = ()

    async def __aenter__(self) -> AsyncPoolPermit:
        if self._held:
            raise RuntimeError(f"this permit of pool {self.section.name!r} is already held")
        ctx, host, section = self._ctx, self._ctx.host, self.section
        ticket = Ticket()
        loop = asyncio.get_running_loop()
        if not section.enter(ticket, lambda: LoopSignal(loop)):
            began = time.monotonic()
            with host.lock:
                host.permit_waiting(ctx.task, ticket)
            try:
                await ticket.event.wait(section.acquire_timeout_s)
            except asyncio.CancelledError:
                with host.lock:
                    host.permit_done(ctx.task)
                if section.settle(ticket):
                    section.release()
                raise
            self._after_wait(section.settle(ticket), began)
        self._held = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class LoopFeed(Protocol):
    """What the executor tells the worker that feeds it (the completer's side)."""

    def started(self, ctx: TaskContext) -> None:
        """A coroutine began running `ctx` (on the loop thread)."""
        ...

    def finished(self, ended: list[tuple[TaskContext, Outcome]]) -> None:
        """These attempts ended with these outcomes; their slots are free (on the loop
        thread, once per turn of the loop for all that ended in it)."""
        ...


@dataclass
class LoopRoom:
    """How many attempts the loop may still take: the worker's `async_concurrency` and the
    kinds' own caps. Counted by the worker under its attempts lock (claimed = handed over,
    until finished), so a claim never brings more than the caps allow at once."""

    cap: int
    kind_caps: Mapping[str, int | None]
    held: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def free(self) -> int:
        """How many more attempts a claim may bring for the loop (0: none). A claim brings
        tasks of any kind, so the room of the capped kinds adds up, and any uncapped kind
        leaves only the worker's cap."""
        room = self.cap - self.held
        if self.kind_caps and None not in self.kind_caps.values():
            room = min(room, sum(max(0, cap - self.by_kind.get(kind, 0))
                                 for kind, cap in self.kind_caps.items() if cap is not None))
        return max(0, room)

    def take(self, kind: str) -> None:
        self.held += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def give(self, kind: str) -> None:
        self.held -= 1
        self.by_kind[kind] -= 1


class AsyncExecutor:
    """One event loop thread running the coroutine attempts a worker hands it (module doc)."""

    def __init__(self, feed: LoopFeed, fns: Callable[[str], Callable[..., Any]],
                 kind_caps: Mapping[str, int | None], emit: Callable[[Event], None],
                 clock: Callable[[], float], worker_id: str) -> None:
        self._feed = feed
        self._fn = fns
        self._kind_caps = kind_caps
        self._emit = emit
        self._clock = clock
        self._worker_id = worker_id
        self.loop = asyncio.new_event_loop()
        self._running: dict[str, int] = {}  # coroutines per kind (loop thread only)
        #: Outcomes of this turn of the loop, handed over at its end in one go (one lock
        #: and one wake-up for all: `_hand_over`).
        self._ended: list[tuple[TaskContext, Outcome]] = []
        self._queued: dict[str, deque[TaskContext]] = {}  # past their kind's cap
        #: Coroutines stuck past their stop whose slot was given back (ids; loop thread).
        self._freed: set[int] = set()
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()
        #: The loop's lag: the last ping's, and the largest seen (seconds).
        self.lag_s = 0.0
        self.lag_max_s = 0.0
        self.blocked = 0  # pings later than LAG_BLOCKED_S

    def start(self) -> None:
        ready = threading.Event()
        self.loop.call_soon(ready.set)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="taskfuse-event-loop")
        self._thread.start()
        ready.wait()
        self._watcher = threading.Thread(target=self._watch_lag, daemon=True,
                                         name="taskfuse-loop-lag")
        self._watcher.start()

    def submit(self, contexts: list[TaskContext]) -> None:
        """Hand claimed attempts to the loop (any thread): one wake-up for the group."""
        self.loop.call_soon_threadsafe(self._admit, contexts)

    def close(self, timeout: float) -> None:
        """Stop the loop (after shutdown released and canceled what ran on it)."""
        self._closing.set()
        if self._thread is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        if self._watcher is not None:
            self._watcher.join(timeout)
        if self._thread is None or not self._thread.is_alive():
            self.loop.close()  # never started, or stopped: its selector and pipe go

    # -- on the loop thread ----------------------------------------------------------------

    def _admit(self, contexts: list[TaskContext]) -> None:
        for ctx in contexts:
            kind = ctx.task.kind
            cap = self._kind_caps.get(kind)
            if cap is not None and self._running.get(kind, 0) >= cap:
                self._queued.setdefault(kind, deque()).append(ctx)
            else:
                self._begin(ctx)

    def _begin(self, ctx: TaskContext) -> None:
        kind = ctx.task.kind
        if ctx.stopped:  # canceled, timed out or released while it waited for its turn
            self._end(ctx, Outcome.failure(ErrorKind.CANCELED, "stopped before it started"))
            return
        self._running[kind] = self._running.get(kind, 0) + 1
        aio = self.loop.create_task(self._run(ctx), name=f"{kind}:{ctx.task.task_id}")
        assert isinstance(ctx, AsyncTaskContext)
        ctx.attach(aio)

    async def _run(self, ctx: TaskContext) -> None:
        """One attempt; every way it ends is an outcome, and its kind's next one starts."""
        self._feed.started(ctx)
        try:
            outcome = Outcome.success(await self._fn(ctx.task.kind)(ctx, ctx.task.payload))
        except asyncio.CancelledError:
            outcome = Outcome.failure(ErrorKind.CANCELED, CANCELED_AT_AWAIT)
        except Exception as exc:
            outcome = attempt_failure(ctx.logger, exc)
        except BaseException as exc:  # SystemExit in a task must not end the loop
            ctx.logger.error("attempt raised %r", exc)
            outcome = Outcome.failure(type(exc).__name__, str(exc))
        kind = ctx.task.kind
        if id(ctx) in self._freed:  # its slot went to another when it got stuck
            self._freed.discard(id(ctx))
        else:
            self._running[kind] -= 1
        self._end(ctx, outcome)
        self._next(kind)

    def _next(self, kind: str) -> None:
        """Start the kind's queued attempts its cap has room for now."""
        queued = self._queued.get(kind)
        while queued and self._running[kind] < (self._kind_caps.get(kind) or 0):
            self._begin(queued.popleft())

    def free_slot(self, ctx: TaskContext) -> None:
        """A coroutine that ignored its cancel is stuck: its kind's cap counts it no more
        (any thread; the watchdog's replacement of a stuck coroutine)."""
        self.loop.call_soon_threadsafe(self._free, ctx)

    def _free(self, ctx: TaskContext) -> None:
        aio = ctx._aio if isinstance(ctx, AsyncTaskContext) else None
        if aio is None or aio.done():  # it ended meanwhile: its end gave the slot back
            return
        self._freed.add(id(ctx))
        self._running[ctx.task.kind] -= 1
        self._next(ctx.task.kind)

    def _end(self, ctx: TaskContext, outcome: Outcome) -> None:
        if not self._ended:
            self.loop.call_soon(self._hand_over)
        self._ended.append((ctx, outcome))

    def _hand_over(self) -> None:
        ended, self._ended = self._ended, []
        self._feed.finished(ended)

    # -- the lag watcher (its own thread) --------------------------------------------------

    def _watch_lag(self) -> None:
        while not self._closing.wait(LAG_EVERY_S):
            pong = threading.Event()
            sent = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(pong.set)
            except RuntimeError:  # the loop was closed
                return
            if not pong.wait(LAG_BLOCKED_S):
                self._name_blocker()
                while not pong.wait(LAG_EVERY_S):
                    if self._closing.is_set():
                        return
            self._lagged(time.monotonic() - sent)

    def _name_blocker(self) -> None:
        """The loop has not answered a ping for LAG_BLOCKED_S: the task on it now blocks it.
        With no task on it, the loop's own work (many callbacks, a starved CPU) is late:
        the lag says so, and no task is blamed."""
        self.blocked += 1
        current = asyncio.current_task(self.loop)
        if current is None:
            return
        name = current.get_name()
        log.warning("event loop blocked for over %.0f ms by task %s: a sync call or CPU "
                    "work in an async task delays every coroutine of this worker",
                    LAG_BLOCKED_S * 1000, name,
                    extra={"task_id": name.partition(":")[2] or name})

    def _lagged(self, lag: float) -> None:
        self.lag_s = lag
        self.lag_max_s = max(self.lag_max_s, lag)
        if lag >= LAG_REPORT_S:
            self._emit(Event(self._clock(), EventKind.WAIT, None, None, None, None, None,
                             "loop_lag", None, self._worker_id, "event_loop", lag))


AsyncTaskContext._call_type = AsyncDownstreamCall
AsyncTaskContext._permit_type = AsyncPoolPermit
