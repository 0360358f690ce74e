"""Task programs for real: work, DB queries and HTTP calls, inside the threaded runtime.

A scenario's task program (work / db / call steps) becomes one task function registered
for every kind, written as any user's task code is: each HTTP call is
`ctx.downstream(name).call(request)`, so the runtime applies the limits' client timeout,
per-call retries with backoff and budget, breaker, bulkhead and token bucket, exactly as
the simulator's client does, while the task keeps holding whatever it holds; each DB step
takes its turn with `ctx.pool(name)` (the runtime's FIFO section of the pool's size) before
it takes a real connection. Requests use keep-alive connections per downstream, opened
before the run starts (connections.py), and the harness measures its own share of each
call (harness.py).

Every request carries the task's trace: a W3C `traceparent` header when the context offers
`ctx.traceparent()`, else `X-Trace-Id`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lab.calls import CallCounters
from lab.loadtest.connections import CallBroken, CallTimeout, Connections
from lab.loadtest.harness import HarnessStats
from lab.loadtest.pools import PoolError, RealPool
from lab.loadtest.record import DbRecorder
from lab.loadtest.servers import WARM_QUERY
from lab.model.provider import TIMEOUT
from lab.scenario import CallStep, CpuStep, DbStep, HangStep, Step, WorkStep
from lab.scenario import Downstream as DownstreamSpec
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
    """Requests to one emulated downstream, made through `ctx.downstream(name).call`."""

    def __init__(self, name: str, spec: DownstreamSpec, url: str, clock: Any,
                 http: Connections, harness: HarnessStats | None = None) -> None:
        self.name = name
        self.url = url
        self.clock = clock
        self.http = http
        self.timeout = spec.client.timeout_s
        self.stats = CallStats()
        self.harness = harness if harness is not None else HarnessStats()

    def warm(self, connections: int) -> None:
        """Open `connections` keep-alive connections before the run: a real client has them
        already, and a connection set up inside the first calls would add tens of
        milliseconds to exactly the burst that shows the provider's bucket."""
        self.http.warm(connections, f"{WARM_QUERY}=1")

    def call(self, ctx: TaskContext) -> None:
        """One logical call; the runtime retries it. Raises TaskError with the final kind.

        Counted as the simulator counts: every attempt sent, and (`counted_call`) a retry
        for every attempt after the first.
        """

        def request(timeout: float | None = None) -> None:
            self.stats.sent(self.clock.now())
            began = time.monotonic()
            error = self._request(ctx)
            CALL_ENDED.at = ended = time.monotonic()
            latency = ended - began
            if error is None and timeout is not None and latency > timeout:
                error = TIMEOUT  # answered after the client gave up: the runtime says so too
            self.stats.received(error, self.clock.scenario(latency))
            if error is not None:
                raise CallFailed(error)

        counted_call(ctx, self.name, request, self.stats.count)

    def _request(self, ctx: TaskContext) -> str | None:
        began = time.monotonic()
        try:
            status, kind, served = self.http.get(trace_headers(ctx), self.timeout)
        except CallTimeout:
            return TIMEOUT
        except CallBroken:
            return ErrorKind.CONNECTION_RESET
        self.harness.call(self.name, time.monotonic() - began, served)
        if status < 400:
            return None
        return kind or f"http_{status}"


def counted_call(ctx: Any, name: str, request: Callable[[float | None], None],
                 count: Callable[[bool, bool], None]) -> None:
    """`ctx.downstream(name).call(request)`, counting what the runtime's call loop decided
    as the simulator counts it: `count(retried, rejected)` for every attempt after the first
    (sent, or refused by an open breaker) and for a first attempt refused. On a thread and
    in a task process alike (proctask.py), whose counts live elsewhere."""
    attempts = 0

    def attempt(timeout: float | None = None) -> None:
        nonlocal attempts
        if attempts:
            count(True, False)
        attempts += 1
        request(timeout)

    try:
        ctx.downstream(name).call(attempt)
    except DownstreamRejected:
        count(attempts > 0, True)
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


class Programs:
    """Runs compiled task programs; `run` is the task function of every kind."""

    def __init__(self, pools: dict[str, RealPool], clients: dict[str, DownstreamClient],
                 clock: Any, seed: int, pause: Callable[[float], bool]) -> None:
        self.pools = pools
        self.clients = clients
        self.clock = clock
        self.seed = seed
        self.pause = pause
        self.programs: list[list[Callable[[TaskContext, list[tuple[RealPool, Any]]], None]]] = []
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

    def _step(self, step: Step, rng: random.Random) -> Callable[..., None]:
        if isinstance(step, WorkStep):
            return self._work(self._sampler(step.work.sampler(rng)))
        if isinstance(step, CpuStep):  # on threads CPU keeps the worker busy, as work does
            return self._work(self._sampler(step.cpu.sampler(rng)))
        if isinstance(step, DbStep):
            db = step.db
            return self._db(self.pools[db.pool], self._sampler(db.query.sampler(rng)),
                            db.hold == "whole_task")
        if isinstance(step, HangStep):
            hang = step.hang
            return self._hang(hang.probability, self._sampler(rng.random),
                              self._sampler(hang.duration.sampler(rng)))
        assert isinstance(step, CallStep)
        return self._calls(self.clients[step.call.downstream],
                           self._sampler(step.call.count.sampler(rng)))

    def _sampler(self, draw: Callable[[], float]) -> Callable[[], float]:
        """Draws from many threads: one lock keeps each seeded stream consistent."""
        def locked() -> float:
            with self._draw:
                return draw()
        return locked

    def _work(self, draw: Callable[[], float]) -> Callable[..., None]:
        def work(ctx: TaskContext, held: list[tuple[RealPool, Any]]) -> None:
            if self.pause(draw()):
                raise TaskError(ErrorKind.CANCELED, "load test stopping")
        return work

    def _db(self, pool: RealPool, draw: Callable[[], float], whole: bool) -> Callable[..., None]:
        def db(ctx: TaskContext, held: list[tuple[RealPool, Any]]) -> None:
            clock, began = self.clock, time.monotonic()
            try:
                conn = pool.acquire(ctx.pool(pool.name))  # a turn, then a connection
            except PoolError as exc:
                raise TaskError(exc.kind, str(exc)) from None
            held.append((pool, conn))
            granted = time.monotonic()
            self.record.granted(clock.now(), pool.name, clock.scenario(granted - began), ctx.task)
            pool.hold(conn, draw(), self.pause)
            self.record.queried(clock.now(), pool.name,
                                clock.scenario(time.monotonic() - granted), whole, ctx.task)
            if not whole:
                held.pop()
                pool.release(conn)
        return db

    def _hang(self, probability: float, draw: Callable[[], float],
              duration: Callable[[], float]) -> Callable[..., None]:
        """Block deaf to the task's cancellation, as a hung socket read does (the load test's
        own stop still ends it, so a run cannot outlive its harness)."""
        def hang(ctx: TaskContext, held: list[tuple[RealPool, Any]]) -> None:
            if draw() < probability:
                self.pause(duration())
        return hang

    def _calls(self, client: DownstreamClient, count: Callable[[], float]
               ) -> Callable[..., None]:
        def calls(ctx: TaskContext, held: list[tuple[RealPool, Any]]) -> None:
            for _ in range(int(count() + 0.5)):
                client.call(ctx)
        return calls

    def run(self, ctx: TaskContext, payload: Any) -> None:
        """The task function: the program's steps in order, giving back what it held."""
        self._count(ctx)
        held: list[tuple[RealPool, Any]] = []
        try:
            for step in self.programs[int(payload)]:
                step(ctx, held)
                if ctx.cancelled():
                    break
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
