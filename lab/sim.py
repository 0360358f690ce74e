"""The simpy driver of the core: the real Scheduler, MemoryStore and fuses in virtual time.

The driver only waits. Workers ask `scheduler.claim` and run what it answers, or sleep until
its `Idle.until` or until woken; task steps ask the pools and the downstreams' guards; the
outcome goes back through `scheduler.complete`. The watchdog and the sweeper are periodic
processes calling `expire` and `sweep`. No delay, limit or next state is computed here.

Keeping it fast (DESIGN.md): one process per worker; steps and calls are `yield from`
sub-generators; a simpy event is created only when something really waits (a free connection
or permit costs none); idle workers are woken one at a time, each passing the baton on when
it found work, so there is no thundering herd and no polling.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from lab.calls import Downstream
from lab.model.business import BusinessTraffic
from lab.model.pool import DB_UNAVAILABLE, POOL_TIMEOUT, Pool
from lab.model.provider import Provider
from lab.scenario import BatchSpec, CallStep, DbStep, Scenario, Step, WorkStep
from taskfuse.core.adaptive import make_adaptive
from taskfuse.core.breaker import BreakerChange, CircuitBreaker
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import Guard
from taskfuse.core.metrics import AlertEvaluator, AlertRule, MetricsAggregator
from taskfuse.core.ratelimit import TokenBucket
from taskfuse.core.scheduler import Completed, Scheduler, SchedulerConfig, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.store.memory import MemoryStore
from taskfuse.tuning import collect_rarely

WORK, DB, CALL = 0, 1, 2
OK = Outcome.success(None)
_PENDING = TaskStatus.PENDING


@dataclass
class Program:
    """A task's steps compiled to tuples of samplers and model objects."""

    steps: list[tuple[Any, ...]]
    downstreams: tuple[str, ...]


@dataclass
class RunStats:
    """What the driver counts beyond the core's own events."""

    attempts: int = 0
    first_waits: list[float] = field(default_factory=list)
    lost_races: int = 0
    deferred: int = 0
    submitted: int = 0
    duplicates: int = 0
    crashed_workers: int = 0


class Simulation:
    """One run of a scenario. `run()` returns when every task ended or the horizon passed."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int | None = None,
        sinks: list[Callable[[Event], None]] | None = None,
        on_sample: Callable[[Simulation], None] | None = None,
        on_progress: Callable[[float, float], None] | None = None,
    ) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.env = simpy.Environment()
        self.metrics = MetricsAggregator()
        self.scheduler = self._make_scheduler(sinks or [])
        self.pools = {name: Pool(self.env, name, spec) for name, spec in scenario.pools.items()}
        self.downstreams = {name: self._make_downstream(name, spec)
                            for name, spec in scenario.downstreams.items()}
        self.business = self._make_business()
        self.programs: list[Program] = []
        self.stats = RunStats()
        self.alerts = self._make_alerts()
        self.idle: dict[simpy.Event, None] = {}
        self.workers: list[simpy.Process] = []
        self.dead: set[int] = set()
        self.arrivals_left = 0
        self.finished = self.env.event()
        self.ended_at: float | None = None
        self.on_sample = on_sample
        self.on_progress = on_progress
        self.detail: Callable[[Event], None] | None = None
        self.wall_s = 0.0

    def record_history(self, sink: Callable[[Event], None]) -> None:
        """Send every event, including per-attempt detail (pool waits, failed calls), to
        `sink`. Without a taker those details are not even built: they cost a tenth of a run."""
        self.scheduler.emit.add(sink)
        self.detail = sink
        for ds in self.downstreams.values():
            ds.detail = sink

    # -- building the world ----------------------------------------------------------------

    def rng(self, concern: str) -> random.Random:
        """One seeded stream per concern, so adding a draw in one place shifts no other."""
        return random.Random(f"{self.seed}:{concern}")

    def _make_scheduler(self, sinks: list[Callable[[Event], None]]) -> Scheduler:
        sc = self.sc
        retry = sc.retry
        return Scheduler(
            MemoryStore(),
            policy=retry.build(),
            config=SchedulerConfig(
                default_timeout=sc.task_timeout_s,
                lease_s=sc.sweeper.lease_s,
                max_pending_age_s=sc.sweeper.max_pending_age_s,
            ),
            rng=self.rng("scheduler"),
            sinks=[self.metrics, *sinks],
            budget=retry.budget.build() if retry.budget else None,
        )

    def _make_downstream(self, name: str, spec: Any) -> Downstream:
        client = spec.client
        breaker = CircuitBreaker(client.breaker.build(), name) if client.breaker else None
        bulkhead: Bulkhead[Any] | None = (
            Bulkhead(client.bulkhead, name) if client.bulkhead else None
        )
        adaptive = None
        if client.adaptive is not None:
            a = client.adaptive
            kwargs = {"latency_threshold_s": a.latency_threshold_s} if a.kind == "aimd" else {}
            adaptive = make_adaptive(a.kind, a.initial or client.bulkhead, a.min, a.max, **kwargs)
        bucket = (
            TokenBucket(client.rate_limit.rate, client.rate_limit.burst)
            if client.rate_limit else None
        )
        guard = self.scheduler.add_guard(
            Guard(name, bulkhead=bulkhead, bucket=bucket, breaker=breaker, adaptive=adaptive)
        )
        provider = Provider(self.env, name, spec.provider, self.rng(f"latency:{name}"),
                            self.rng(f"errors:{name}"))
        return Downstream(self.env, name, spec, guard, provider, self.rng(f"retry:{name}"))

    def _make_business(self) -> BusinessTraffic | None:
        spec = self.sc.business
        if spec is None:
            return None
        breaker = None
        if spec.breaker is not None:
            breaker = CircuitBreaker(spec.breaker.build(), "gateway", self._gateway_change)
        return BusinessTraffic(self.env, spec, self.pools[spec.pool], self.rng("business"),
                               self.rng("business-query"), breaker)

    def _gateway_change(self, change: BreakerChange) -> None:
        self.scheduler.emit(Event(change.at, EventKind.BREAKER, None, None, None,
                                  change.src.value, change.dst.value, change.reason, None, None,
                                  "gateway"))

    def _make_alerts(self) -> AlertEvaluator:
        a = self.sc.alerts
        limit = a.running_limit or (self.sc.workers if isinstance(self.sc.workers, int) else 1e9)
        rules = [
            AlertRule("running_above_limit", "running", ">", limit, for_s=a.running_for_s),
            AlertRule("queue_depth_high", "queue_depth", ">", a.queue_depth, for_s=a.queue_for_s),
            AlertRule("success_rate_low", "success_rate", "<", a.success_rate, min_samples=20),
            AlertRule("p99_above_history", "p99_ratio", ">", a.p99_ratio),
        ]
        return AlertEvaluator(rules, self.metrics, self.scheduler.emit,
                              p99_baseline_s=a.p99_baseline_s)

    def _compile(self, steps: list[Step]) -> Program:
        compiled: list[tuple[Any, ...]] = []
        gated: list[str] = []
        for k, step in enumerate(steps):
            rng = self.rng(f"program:{len(self.programs)}:{k}")
            if isinstance(step, WorkStep):
                compiled.append((WORK, step.work.sampler(rng)))
            elif isinstance(step, DbStep):
                db = step.db
                compiled.append((DB, self.pools[db.pool], db.query.sampler(rng),
                                 db.hold == "whole_task"))
            elif isinstance(step, CallStep):
                ds = self.downstreams[step.call.downstream]
                compiled.append((CALL, ds, step.call.count.sampler(rng)))
                if ds.guard.breaker is not None and ds.name not in gated:
                    gated.append(ds.name)
        program = Program(compiled, tuple(gated))
        self.programs.append(program)
        return program

    # -- arrivals --------------------------------------------------------------------------

    def _start_batches(self) -> None:
        for spec in self.sc.batches:
            self.scheduler.submit_batch([], 0.0, spec.id, cap=spec.cap)
            self.arrivals_left += 1
            self.env.process(self._arrivals(spec))

    def _arrivals(self, spec: BatchSpec) -> Generator[simpy.Event, Any, None]:
        env = self.env
        make = self._task_factory(spec)
        arrival = spec.arrival
        if arrival.start_s > 0:
            yield env.timeout(arrival.start_s)
        if arrival.kind == "closed":
            self._submit([s for i in range(spec.count) for s in make(i)], spec)
        else:
            expo = self.rng(f"arrivals:{spec.id}").expovariate
            steps = sorted((s.at_s, s.rate) for s in arrival.steps)
            i = 0
            while i < spec.count and env.now < self.sc.horizon_s:
                rate = _rate_at(arrival.rate or 0.0, steps, env.now)
                change = next((at for at, _ in steps if at > env.now), None)
                gap = expo(rate) if rate > 0 else float("inf")
                if change is not None and env.now + gap >= change:
                    yield env.timeout(change - env.now)
                    continue
                if gap == float("inf"):
                    break
                yield env.timeout(gap)
                self._submit(make(i), spec)
                i += 1
        self.arrivals_left -= 1
        self._check_finished()

    def _task_factory(self, spec: BatchSpec) -> Callable[[int], list[TaskSpec]]:
        program = self._compile(spec.program)
        index = len(self.programs) - 1
        children = [(c, self._compile(c.program), len(self.programs) - 1) for c in spec.children]
        rng = self.rng(f"children:{spec.id}")
        keyed = spec.duplicates > 0

        def make(i: int) -> list[TaskSpec]:
            tid = f"{spec.id}-{i}"
            out = [TaskSpec(spec.kind, index, tid, spec.id, None, tid if keyed else None, (),
                            spec.priority, spec.max_retry, spec.timeout_s, None,
                            program.downstreams)]
            for child, cprog, cindex in children:
                n = int(child.count.sampler(rng)() + 0.5)
                out += [TaskSpec(child.kind, cindex, f"{tid}.{child.kind}{j}", spec.id, None,
                                 None, (tid,), spec.priority, spec.max_retry, spec.timeout_s,
                                 None, cprog.downstreams) for j in range(n)]
            return out

        return make

    def _submit(self, specs: list[TaskSpec], batch: BatchSpec) -> None:
        if not specs:
            return
        now = self.env.now
        self.scheduler.submit_many(specs, now, batch_id=batch.id)
        self.stats.submitted += len(specs)
        if batch.duplicates:
            dup = self.rng(f"duplicates:{batch.id}:{specs[0].task_id}").random
            again = [s for s in specs if s.idempotency_key and dup() < batch.duplicates]
            if again:
                self.scheduler.submit_many(
                    [TaskSpec(**{**_spec_fields(s), "task_id": s.task_id + "~dup"})
                     for s in again], now, batch_id=batch.id)
                self.stats.duplicates += len(again)
        self._wake(len(specs))

    # -- workers ---------------------------------------------------------------------------

    def _wake(self, n: int = 1) -> None:
        """Wake up to n idle workers (oldest first)."""
        idle = self.idle
        while n > 0 and idle:
            event = next(iter(idle))
            del idle[event]
            event.succeed()
            n -= 1

    def _sleep(self, until: float | None) -> simpy.Event:
        env = self.env
        event = env.event()
        self.idle[event] = None
        if until is not None:
            env.timeout(max(0.0, until - env.now)).callbacks.append(
                lambda _: self._wake_this(event)
            )
        return event

    def _wake_this(self, event: simpy.Event) -> None:
        if event in self.idle:
            del self.idle[event]
            event.succeed()

    def worker(self, wid: str, number: int) -> Generator[simpy.Event, Any, None]:
        env = self.env
        claim = self.scheduler.claim
        n = self.sc.claim_batch
        sleeping: simpy.Event | None = None
        try:
            while True:
                answer = claim(wid, env.now, n)
                if answer.__class__ is Work:
                    if self.idle:
                        self._wake(1)  # pass the baton: more may be claimable
                    for task in answer.tasks:  # type: ignore[union-attr]
                        yield from self.run_task(task)
                else:
                    sleeping = self._sleep(answer.until)  # type: ignore[union-attr]
                    yield sleeping
                    sleeping = None
        except simpy.Interrupt:
            if sleeping is not None:
                self.idle.pop(sleeping, None)
            self.dead.add(number)

    def dispatcher(self) -> Generator[simpy.Event, Any, None]:
        """Unbounded workers (open loop): every claimable task starts at once."""
        env = self.env
        while True:
            answer = self.scheduler.claim("open", env.now, 10_000)
            if answer.__class__ is Work:
                for task in answer.tasks:  # type: ignore[union-attr]
                    env.process(self.run_task(task))
            else:
                yield self._sleep(answer.until)  # type: ignore[union-attr]

    def run_task(self, task: Task) -> Generator[simpy.Event, Any, None]:
        env = self.env
        stats = self.stats
        stats.attempts += 1
        if task.version == 1:
            stats.first_waits.append(env.now - task.created_at)
        program = self.programs[task.payload]
        held: list[tuple[Any, ...]] = []
        error: str | None = None
        last = program.steps[-1]
        try:
            for step in program.steps:
                op = step[0]
                if op == WORK:
                    yield env.timeout(step[1]())
                elif op == DB:
                    error = yield from self._db(task, step, held)
                else:  # the calls of a step, each with its retries
                    ds = step[1]
                    for _ in range(int(step[2]() + 0.5)):
                        error = yield from ds.call(held, task)
                        if error is not None:
                            break
                if error is not None or (step is not last and self.scheduler.is_cancelled(task)):
                    break  # cooperative cancel between steps; after the last, complete() tells
        except simpy.Interrupt:
            self._abandon(held)
            raise
        self._release(held)
        self._complete(task, OK if error is None else Outcome.failure(error))

    def _db(self, task: Task, step: tuple[Any, ...], held: list[tuple[Any, ...]]
            ) -> Generator[simpy.Event, Any, str | None]:
        _, pool, query, whole = step
        env = self.env
        now = env.now
        if pool.outages and pool.down(now):
            pool.refused += 1
            return DB_UNAVAILABLE
        if pool.bulkhead.try_acquire_nowait():
            pool.waits.append(0.0)
        else:
            event = pool.wait_event(now)
            held.append(("poolwait", pool, event))
            granted = yield event
            held.pop()
            if self.detail is not None:
                self.detail(Event(env.now, EventKind.WAIT, task.task_id, task.batch_id, None,
                                  None, None, "pool" if granted else POOL_TIMEOUT,
                                  task.retry_count + 1, task.worker_id, pool.name, env.now - now))
            if not granted:
                return POOL_TIMEOUT
        held.append(("conn", pool))
        yield env.timeout(query())
        if not whole:
            held.pop()
            pool.release()
        return None

    def _release(self, held: list[tuple[Any, ...]]) -> None:
        for entry in reversed(held):
            entry[1].release()
        held.clear()

    def _abandon(self, held: list[tuple[Any, ...]]) -> None:
        """A crashed worker's connections are closed by the database; its waits end."""
        for entry in reversed(held):
            kind = entry[0]
            if kind == "conn":
                entry[1].release()
            elif kind == "poolwait":
                entry[1].abandon(entry[2])
            else:
                entry[1].abandon(kind, entry[2])
        held.clear()

    def _complete(self, task: Task, outcome: Outcome) -> None:
        answer = self.scheduler.complete(task, outcome, self.env.now)
        if answer.__class__ is Completed:
            if answer.task.status is _PENDING and answer.task.retry_count == task.retry_count:  # type: ignore[union-attr]
                self.stats.deferred += 1
            self._wake(1)
            self._check_finished()
        else:
            self.stats.lost_races += 1

    # -- periodic processes ----------------------------------------------------------------

    def watchdog(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        interval = self.sc.watchdog_interval_s
        while True:
            yield env.timeout(interval)
            if self.scheduler.expire(env.now):
                self._wake(1)
                self._check_finished()

    def sweeper(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            yield env.timeout(self.sc.sweeper.interval_s)
            if self.scheduler.sweep(env.now):
                self._wake(1)
                self._check_finished()

    def sampler(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        interval = self.sc.sample_interval_s
        while True:
            self.alerts.evaluate(env.now)
            if self.on_sample is not None:
                self.on_sample(self)
            if self.on_progress is not None:
                self.on_progress(env.now, self.sc.horizon_s)
            yield env.timeout(interval)

    def faults(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for fault in sorted(self.sc.faults, key=lambda f: f.at_s):
            if fault.at_s > env.now:
                yield env.timeout(fault.at_s - env.now)
            alive = [i for i in range(len(self.workers)) if i not in self.dead]
            for i in alive[: fault.workers]:
                self.workers[i].interrupt("crash")
                self.stats.crashed_workers += 1

    def _check_finished(self) -> None:
        m = self.metrics
        if (
            self.arrivals_left == 0 and m.running == 0 and m.queue_depth == 0
            and not self.finished.triggered
        ):
            self.ended_at = self.env.now
            self.finished.succeed()

    # -- running ---------------------------------------------------------------------------

    def run(self) -> Simulation:
        env = self.env
        started = time.perf_counter()
        self._start_batches()
        workers = self.sc.workers
        if workers == "unbounded":
            env.process(self.dispatcher())
        else:
            for i in range(int(workers)):
                self.workers.append(env.process(self.worker(f"w{i + 1}", i)))
        env.process(self.watchdog())
        env.process(self.sweeper())
        env.process(self.sampler())
        if self.sc.faults:
            env.process(self.faults())
        if self.business is not None:
            env.process(self.business.run())
        horizon = env.timeout(self.sc.horizon_s)
        horizon.callbacks.append(lambda _: self.finished.triggered or self.finished.succeed())
        with collect_rarely():
            env.run(until=self.finished)
        if self.business is not None:
            self.business.stopped = True
        self.alerts.evaluate(env.now)
        if self.on_sample is not None:
            self.on_sample(self)
        self.wall_s = time.perf_counter() - started
        return self

    @property
    def now(self) -> float:
        return float(self.env.now)

    @property
    def simpy_events(self) -> int:
        """How many simpy events were scheduled: the deterministic measure of cost.

        Read from the repr of simpy's id counter (``count(N)``): `next()` on it would spend
        an id, so reading twice would give two answers and shift later events' ids.
        """
        return int(repr(self.env._eid)[len("count("):-1])  # type: ignore[attr-defined]


def _rate_at(base: float, steps: list[tuple[float, float]], now: float) -> float:
    rate = base
    for at, r in steps:
        if at <= now:
            rate = r
    return rate


def _spec_fields(spec: TaskSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in TaskSpec.__slots__}
