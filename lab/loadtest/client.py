"""Task programs for real: work, DB queries and HTTP calls, inside the threaded runtime.

A scenario's task program (work / db / call steps) becomes one task function registered
for every kind. Each HTTP call goes through the runtime's own guard,
`with ctx.downstream(name):` (breaker -> bulkhead -> token bucket, recorded on exit), with
keep-alive connections per downstream (connections.py). Failed calls are retried by
the client's RetryPolicy from the scenario (the core decides, this module only sleeps),
while the task keeps holding whatever it holds — exactly what the simulator models.

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
from lab.scenario import CallStep, DbStep, Step, WorkStep
from lab.scenario import Downstream as DownstreamSpec
from taskfuse.core.retry import ErrorKind, RetryBudget, RetryPolicy
from taskfuse.runtime import DownstreamRejected, TaskContext, TaskError

#: When this thread's last request really ended (monotonic): the runtime stamps a call's
#: event later, under its lock, so the trace takes the end from here (runner.EventSink).
CALL_ENDED = threading.local()


class CallFailed(TaskError):
    """One attempt's failure, raised inside the guard so the breaker counts it."""


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


class DownstreamClient:
    """Calls to one emulated downstream: HTTP, the guard, the client's retry policy."""

    def __init__(self, name: str, spec: DownstreamSpec, url: str, clock: Any,
                 http: Connections, seed: int, pause: Callable[[float], bool],
                 harness: HarnessStats | None = None) -> None:
        self.name = name
        self.url = url
        self.clock = clock
        self.http = http
        self.timeout = spec.client.timeout_s
        self.policy: RetryPolicy = spec.client.retry.build()
        budget = spec.client.retry.budget
        self.budget: RetryBudget | None = budget.build() if budget is not None else None
        self.rng = random.Random(f"{seed}:retry:{name}")
        self.lock = threading.Lock()  # the policy's rng and the budget are not thread-safe
        self.pause = pause
        self.stats = CallStats()
        self.harness = harness if harness is not None else HarnessStats()

    def warm(self, connections: int) -> None:
        """Open `connections` keep-alive connections before the run: a real client has them
        already, and a connection set up inside the first calls would add tens of
        milliseconds to exactly the burst that shows the provider's bucket."""
        self.http.warm(connections, f"{WARM_QUERY}=1")

    def call(self, ctx: TaskContext) -> None:
        """One logical call with its retries; raises TaskError with the final error kind."""
        retry = 0
        previous: float | None = None
        while True:
            if self.budget is not None:
                with self.lock:
                    self.budget.record_attempt(self.clock.elapsed(), retry == 0)
            error = self._attempt(ctx)
            if error is None:
                return
            with self.lock:
                decision = self.policy.decide(retry, error, self.rng, previous, self.budget,
                                              self.clock.elapsed())
            if not decision.retry:
                raise TaskError(error, f"{self.name}: {decision.reason}")
            with self.stats.lock:
                self.stats.retries += 1
            retry += 1
            previous = decision.delay
            if decision.delay > 0 and self.pause(decision.delay):
                raise TaskError(ErrorKind.CANCELED, "load test stopping")

    def _attempt(self, ctx: TaskContext) -> str | None:
        """One request through the guard; the error kind, or None on success."""
        try:
            with ctx.downstream(self.name):
                self.stats.sent(self.clock.now())
                began = time.monotonic()
                error = self._request(ctx)
                CALL_ENDED.at = ended = time.monotonic()
                self.stats.received(error, self.clock.scenario(ended - began))
                if error is not None:
                    raise CallFailed(error)
        except CallFailed as failed:
            return failed.kind
        except DownstreamRejected:
            with self.stats.lock:
                self.stats.rejected += 1
            raise
        return None

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
        if isinstance(step, DbStep):
            db = step.db
            return self._db(self.pools[db.pool], self._sampler(db.query.sampler(rng)),
                            db.hold == "whole_task")
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
                conn = pool.acquire()
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
        """An attempt; on a task's first claim, its queue wait (submit to first start)."""
        task = ctx.task
        with self.stats.lock:
            self.stats.attempts += 1
            if task.task_id not in self._seen and task.started_at is not None:
                self._seen.add(task.task_id)
                self.stats.first_waits.append(
                    self.clock.scenario(task.started_at - task.created_at))
