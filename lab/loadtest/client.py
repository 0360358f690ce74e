"""Task programs for real: work, DB queries and HTTP calls, inside the runtime: on its
worker threads, or as coroutines on its event loop for a kind of `executor: async`.

A scenario's task program (work / db / call steps) becomes one task function registered
for every kind, written as any user's task code is: each HTTP call is
`ctx.downstream(name).call(request)`, so the runtime applies the limits' client timeout,
per-call retries with backoff and budget, breaker, bulkhead and token bucket, exactly as
the simulator's client does, while the task keeps holding whatever it holds; each DB step
takes its turn with `ctx.pool(name)` (the runtime's FIFO section of the pool's size) before
it takes a real connection. Requests use keep-alive connections per downstream, opened
before the run starts (connections.py), and the harness measures its own share of each
call (harness.py). An `async` kind runs the same compiled program as an `async def`
(`Programs.arun`): its calls are `await ctx.downstream(name).call(request)` over asyncio
stream connections, its DB turns `async with ctx.pool(name)`, its waits loop timers.

Every request carries the task's trace: a W3C `traceparent` header when the context offers
`ctx.traceparent()`, else `X-Trace-Id`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lab.loadtest.connections import (
    Answer,
    AsyncConnections,
    CallBroken,
    CallTimeout,
    Connections,
)
from lab.loadtest.harness import HarnessStats
from lab.loadtest.pools import PoolError, RealPool
from lab.loadtest.record import DbRecorder
from lab.loadtest.servers import WARM_QUERY
from lab.model.provider import TIMEOUT
from lab.scenario import CallStep, CpuStep, DbStep, HangStep, Step, WorkStep
from lab.scenario import Downstream as DownstreamSpec
from lab.simulate.client import CallCounters
from taskfuse.core.retry import ErrorKind
from taskfuse.runtime import DownstreamRejected, TaskContext, TaskError

#: When this thread's last request really ended (monotonic): the runtime stamps a call's
#: event later, under its lock, so the trace takes the end from here (runner.EventSink).
CALL_ENDED = threading.local()


class CallFailed(TaskError):
    """One attempt's failure: its kind is what the runtime's call loop records and judges."""


class CallStats(CallCounters):
    """The simulator's counters (same names, read by the same report and timeline), safe
    to update from many worker threads. Times are scenario seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False  # the run's numbers were taken: count no more
        self.lock = threading.Lock()

    def sent(self, now: float) -> None:
        with self.lock:
            if not self.frozen:
                super().sent(now)

    def received(self, error: str | None, latency: float) -> None:
        with self.lock:
            if not self.frozen:
                super().received(error, latency)

    def count(self, retried: bool, rejected: bool = False) -> None:
        """A retry the client's policy decided (seen as its attempt), a breaker refusal."""
        with self.lock:
            if not self.frozen:
                self.retries += retried
                self.rejected += rejected


class DownstreamClient:
    """Requests to one emulated downstream, made through `ctx.downstream(name).call`: from a
    worker thread (`call`, over `http`) or from a coroutine of an `async` kind (`acall`,
    over `ahttp` on the runtime's event loop). Counting, timing and judging an answer are
    one code for both; only the request's IO differs."""

    def __init__(self, name: str, spec: DownstreamSpec, url: str, clock: Any,
                 http: Connections, harness: HarnessStats | None = None,
                 ahttp: AsyncConnections | None = None) -> None:
        self.name = name
        self.url = url
        self.clock = clock
        self.http = http
        self.ahttp = ahttp
        self.timeout = spec.client.timeout_s
        self.stats = CallStats()
        self.harness = harness if harness is not None else HarnessStats()

    def warm(self, connections: int) -> None:
        """Open `connections` keep-alive connections before the run: a real client has them
        already, and a connection set up inside the first calls would add tens of
        milliseconds to exactly the burst that shows the provider's bucket."""
        self.http.warm(connections, f"{WARM_QUERY}=1")

    async def awarm(self, connections: int) -> None:
        """`warm` for the coroutines' connections (run on the runtime's event loop)."""
        assert self.ahttp is not None
        await self.ahttp.warm(connections, f"{WARM_QUERY}=1")

    def call(self, ctx: TaskContext) -> None:
        """One logical call; the runtime retries it. Raises TaskError with the final kind.

        Counted as the simulator counts: every attempt sent, and (`counted_call`) a retry
        for every attempt after the first.
        """

        def request(timeout: float | None = None) -> None:
            began = self._sent()
            try:
                answer: Answer | str = self.http.get(trace_headers(ctx), self.timeout)
            except (CallTimeout, CallBroken) as exc:
                answer = _failure(exc)
            self._received(began, answer, timeout)

        counted_call(ctx, self.name, request, self.stats.count)

    async def acall(self, ctx: TaskContext) -> None:
        """`call` from a coroutine: `await ctx.downstream(name).call(request)`."""
        assert self.ahttp is not None, f"downstream {self.name!r} has no async connections"
        http = self.ahttp

        async def request(timeout: float | None = None) -> None:
            began = self._sent()
            try:
                answer: Answer | str = await http.get(trace_headers(ctx), self.timeout)
            except (CallTimeout, CallBroken) as exc:
                answer = _failure(exc)
            self._received(began, answer, timeout)

        await acounted_call(ctx, self.name, request, self.stats.count)

    def _sent(self) -> float:
        self.stats.sent(self.clock.now())
        return time.monotonic()

    def _received(self, began: float, answer: Answer | str, timeout: float | None) -> None:
        """Count and time one attempt's answer (or its failure's kind); raise CallFailed
        for an error, which the runtime's call loop records and judges."""
        CALL_ENDED.at = ended = time.monotonic()
        latency = ended - began
        if isinstance(answer, str):
            error: str | None = answer
        else:
            status, kind, served = answer
            self.harness.call(self.name, latency, served)
            error = None if status < 400 else kind or f"http_{status}"
        if error is None and timeout is not None and latency > timeout:
            error = TIMEOUT  # answered after the client gave up: the runtime says so too
        self.stats.received(error, self.clock.scenario(latency))
        if error is not None:
            raise CallFailed(error)


def _failure(exc: Exception) -> str:
    """The error kind of a request that got no answer."""
    return TIMEOUT if isinstance(exc, CallTimeout) else ErrorKind.CONNECTION_RESET


class _Counted:
    """The simulator's count of one logical call's attempts: a retry for every attempt
    after the first, and a breaker's refusal (counted as a retry after a first attempt)."""

    __slots__ = ("attempts", "count")

    def __init__(self, count: Callable[[bool, bool], None]) -> None:
        self.count = count
        self.attempts = 0

    def attempt(self) -> None:
        if self.attempts:
            self.count(True, False)
        self.attempts += 1

    def refused(self) -> None:
        self.count(self.attempts > 0, True)


def counted_call(ctx: Any, name: str, request: Callable[[float | None], None],
                 count: Callable[[bool, bool], None]) -> None:
    """`ctx.downstream(name).call(request)`, counting what the runtime's call loop decided
    as the simulator counts it: `count(retried, rejected)` for every attempt after the first
    (sent, or refused by an open breaker) and for a first attempt refused. On a thread and
    in a task process alike (proctask.py), whose counts live elsewhere."""
    counted = _Counted(count)

    def attempt(timeout: float | None = None) -> None:
        counted.attempt()
        request(timeout)

    try:
        ctx.downstream(name).call(attempt)
    except DownstreamRejected:
        counted.refused()
        raise


async def acounted_call(ctx: Any, name: str,
                        request: Callable[[float | None], Awaitable[None]],
                        count: Callable[[bool, bool], None]) -> None:
    """`counted_call` in a coroutine: the same counts, the call awaited."""
    counted = _Counted(count)

    async def attempt(timeout: float | None = None) -> None:
        counted.attempt()
        await request(timeout)

    try:
        await ctx.downstream(name).call(attempt)
    except DownstreamRejected:
        counted.refused()
        raise


def trace_headers(ctx: TaskContext) -> dict[str, str]:
    """traceparent from the context's observability helper if it has one, else the id."""
    traceparent = getattr(ctx, "traceparent", None)
    if callable(traceparent):
        value = traceparent()
        if value:
            return {"traceparent": str(value)}
    return {"X-Trace-Id": ctx.trace_id}


@dataclass
class ProgramStats:
    """Counters of the task function itself (attempts, first queue waits, deferrals)."""

    attempts: int = 0
    first_waits: list[float] = field(default_factory=list)
    deferred: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


#: What a step of a running attempt holds: the pools' connections, given back at its end.
Held = list[tuple[RealPool, Any]]


class Programs:
    """Runs compiled task programs: `run` is the task function of every thread kind, `arun`
    (an `async def`) of every `async` kind. A compiled step draws from its seeded streams
    the same way for both (`_Step`); only how it waits, queues and calls differs."""

    def __init__(self, pools: dict[str, RealPool], clients: dict[str, DownstreamClient],
                 clock: Any, seed: int, pause: Callable[[float], bool],
                 apause: Callable[[float], Awaitable[bool]] | None = None) -> None:
        self.pools = pools
        self.clients = clients
        self.clock = clock
        self.seed = seed
        self.pause = pause
        self.apause = apause if apause is not None else _sleep
        self.programs: list[list[_Step]] = []
        self.stats = ProgramStats()
        self.record = DbRecorder()  # DB steps into the trace, once one is attached
        self._draw = threading.Lock()
        self._seen: set[str] = set()

    def compile(self, steps: list[Step]) -> int:
        """Add a program; returns its index (the tasks' payload)."""
        index = len(self.programs)
        compiled = []
        for k, step in enumerate(steps):
            rng = random.Random(f"{self.seed}:program:{index}:{k}")
            compiled.append(self._step(step, rng))
        self.programs.append(compiled)
        return index

    def _step(self, step: Step, rng: random.Random) -> _Step:
        if isinstance(step, WorkStep):
            return _Work(self, self._sampler(step.work.sampler(rng)))
        if isinstance(step, CpuStep):  # on threads CPU keeps the worker busy, as work does
            return _Cpu(self, self._sampler(step.cpu.sampler(rng)))
        if isinstance(step, DbStep):
            db = step.db
            return _Db(self, self.pools[db.pool], self._sampler(db.query.sampler(rng)),
                       db.hold == "whole_task")
        if isinstance(step, HangStep):
            hang = step.hang
            return _Hang(self, hang.probability, self._sampler(rng.random),
                         self._sampler(hang.duration.sampler(rng)))
        assert isinstance(step, CallStep)
        return _Calls(self, self.clients[step.call.downstream],
                      self._sampler(step.call.count.sampler(rng)))

    def _sampler(self, draw: Callable[[], float]) -> Callable[[], float]:
        """Draws from many threads: one lock keeps each seeded stream consistent."""
        def locked() -> float:
            with self._draw:
                return draw()
        return locked

    def run(self, ctx: TaskContext, payload: Any) -> None:
        """The task function of a thread kind: the program's steps in order, giving back
        what it held."""
        held: Held = []
        with self._attempt(ctx, held):
            for step in self.programs[int(payload)]:
                step.run(ctx, held)
                if ctx.cancelled():
                    break

    async def arun(self, ctx: TaskContext, payload: Any) -> None:
        """The task function of an `async` kind: `run`, awaiting where `run` blocks."""
        held: Held = []
        with self._attempt(ctx, held):
            for step in self.programs[int(payload)]:
                await step.arun(ctx, held)
                if ctx.cancelled():
                    break

    @contextmanager
    def _attempt(self, ctx: TaskContext, held: Held) -> Iterator[None]:
        """Count the attempt (and a deferral by an open breaker); give back what it held."""
        self._count(ctx)
        try:
            yield
        except DownstreamRejected:
            with self.stats.lock:
                self.stats.deferred += 1
            raise
        finally:
            for pool, conn in reversed(held):
                pool.release(conn)

    def _count(self, ctx: TaskContext) -> None:
        """An attempt; on a task's first, its queue wait (submit to when its code began: a
        prefetched task's wait for a thread is queueing, as in the lab)."""
        task = ctx.task
        with self.stats.lock:
            self.stats.attempts += 1
            if task.task_id not in self._seen:
                self._seen.add(task.task_id)
                self.stats.first_waits.append(
                    self.clock.scenario(time.time() - task.created_at))


async def _sleep(seconds: float) -> bool:
    await asyncio.sleep(max(0.0, seconds))
    return False


class _Step:
    """One compiled step: its draws, and how it runs on a thread (`run`) and in a coroutine
    (`arun`)."""

    def __init__(self, programs: Programs) -> None:
        self.p = programs

    def run(self, ctx: TaskContext, held: Held) -> None:
        raise NotImplementedError

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        raise NotImplementedError


def _stopping() -> TaskError:
    return TaskError(ErrorKind.CANCELED, "load test stopping")


class _Work(_Step):
    """Time the task spends away (local work, a wait): its thread is busy, a coroutine is
    not."""

    def __init__(self, programs: Programs, draw: Callable[[], float]) -> None:
        super().__init__(programs)
        self.draw = draw

    def run(self, ctx: TaskContext, held: Held) -> None:
        if self.p.pause(self.draw()):
            raise _stopping()

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        if await self.p.apause(self.draw()):
            raise _stopping()


class _Cpu(_Work):
    """CPU of the task's own code: on a thread, the worker is busy (as `work`); in a
    coroutine it holds the event loop, so it really computes (every other coroutine waits
    for the loop meanwhile: the loop's lag)."""

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        until = time.perf_counter() + self.draw()
        while time.perf_counter() < until:
            pass


class _Db(_Step):
    """A turn of the pool's section (`ctx.pool(name)`), then a real connection held for the
    drawn query time (or until the task ends, `whole_task`)."""

    def __init__(self, programs: Programs, pool: RealPool, draw: Callable[[], float],
                 whole: bool) -> None:
        super().__init__(programs)
        self.pool, self.draw, self.whole = pool, draw, whole

    def run(self, ctx: TaskContext, held: Held) -> None:
        began = time.monotonic()
        try:
            conn = self.pool.acquire(ctx.pool(self.pool.name))  # a turn, then a connection
        except PoolError as exc:
            raise TaskError(exc.kind, str(exc)) from None
        granted = self._granted(ctx, held, conn, began)
        self.pool.hold(conn, self.draw(), self.p.pause)
        self._queried(ctx, held, conn, granted)

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        began = time.monotonic()
        try:
            conn = await self.pool.aacquire(ctx.pool(self.pool.name))
        except PoolError as exc:
            raise TaskError(exc.kind, str(exc)) from None
        granted = self._granted(ctx, held, conn, began)
        await self.pool.ahold(conn, self.draw(), self.p.apause)
        self._queried(ctx, held, conn, granted)

    def _granted(self, ctx: TaskContext, held: Held, conn: Any, began: float) -> float:
        held.append((self.pool, conn))
        clock, granted = self.p.clock, time.monotonic()
        self.p.record.granted(clock.now(), self.pool.name, clock.scenario(granted - began),
                              ctx.task)
        return granted

    def _queried(self, ctx: TaskContext, held: Held, conn: Any, granted: float) -> None:
        clock = self.p.clock
        self.p.record.queried(clock.now(), self.pool.name,
                              clock.scenario(time.monotonic() - granted), self.whole, ctx.task)
        if not self.whole:
            held.pop()
            self.pool.release(conn)


class _Hang(_Step):
    """With its probability, a wait of the drawn duration. On a thread it is deaf to the
    task's cancellation, as a hung socket read is (the load test's own stop still ends it,
    so a run cannot outlive its harness); in a coroutine it is an await, which the
    runtime's cancel at the timeout ends (the scenario's `hang` under `async`)."""

    def __init__(self, programs: Programs, probability: float, draw: Callable[[], float],
                 duration: Callable[[], float]) -> None:
        super().__init__(programs)
        self.probability, self.draw, self.duration = probability, draw, duration

    def run(self, ctx: TaskContext, held: Held) -> None:
        if self.draw() < self.probability:
            self.p.pause(self.duration())

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        if self.draw() < self.probability:
            await self.p.apause(self.duration())


class _Calls(_Step):
    """The drawn number of logical calls to one downstream, one after the other."""

    def __init__(self, programs: Programs, client: DownstreamClient,
                 count: Callable[[], float]) -> None:
        super().__init__(programs)
        self.client, self.count = client, count

    def run(self, ctx: TaskContext, held: Held) -> None:
        for _ in range(int(self.count() + 0.5)):
            self.client.call(ctx)

    async def arun(self, ctx: TaskContext, held: Held) -> None:
        for _ in range(int(self.count() + 0.5)):
            await self.client.acall(ctx)
