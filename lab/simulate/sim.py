"""The simpy driver of the core: the real Scheduler, MemoryStore and fuses in virtual time.

The driver only waits. Workers ask `scheduler.claim` and run what it answers, or sleep until
its `Idle.until` or until woken; task steps ask the pools and the downstreams' guards; the
outcome goes back through `scheduler.complete`. The watchdog and the sweeper are periodic
processes calling `expire` and `sweep`. No delay, limit or next state is computed here.

Keeping it fast (DESIGN.md): one process per worker; steps and calls are `yield from`
sub-generators; a simpy event is created only when something really waits (a free connection
or permit costs none); idle workers are woken one at a time, each passing the baton on when
it found work, so there is no thundering herd and no polling. What a scenario does not use
costs nothing: the store forgets ended tasks (lab/simulate/simstore.py) and keeps the
metrics, so without a trace no event is built; renewals run only under a lease, and the
bookkeeping that lets a crashed worker give back what it held only when a crash fault exists.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from lab.model.arrivals import TaskFactory, arrivals, duplicates_of
from lab.model.business import BusinessTraffic
from lab.model.pool import DB_UNAVAILABLE, POOL_TIMEOUT, Pool
from lab.model.provider import Provider
from lab.scenario import (
    BatchSpec,
    CallStep,
    CpuStep,
    DbStep,
    HangStep,
    Scenario,
    Step,
    WorkStep,
)
from lab.simulate.client import Downstream
from lab.simulate.coroutines import EventLoop
from lab.simulate.holds import BulkheadHolds
from lab.simulate.simstore import LabStore, StoreMetrics, TaskRecord
from taskfuse.core.breaker import BreakerChange, CircuitBreaker
from taskfuse.core.capacity import replaces_stuck, retires_on_return
from taskfuse.core.events import Event, EventKind, slot_wait, thread_wait
from taskfuse.core.metrics import AlertEvaluator
from taskfuse.core.scheduler import DEADLINE_SLACK_S, Completed, Idle, Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.limits.build import (
    alert_rules,
    breaker_config,
    build_guard,
    build_scheduler,
    heartbeat_interval,
    running_limit,
    stuck_bound,
)
from taskfuse.tuning import collect_rarely

OK = Outcome.success(None)
_PENDING = TaskStatus.PENDING
#: The cause of the interrupt that kills a `process` executor's worker process.
KILLED = "killed"
#: The cause of the interrupt that cancels a coroutine (executor: async) at its timeout.
CANCELLED = "cancelled"


# -- a task's program, compiled ------------------------------------------------------------
# One slotted record per kind of step, its samplers and model objects read by name. The
# attempt's loop (`Simulation.run_task`) tells them apart by `step.__class__ is ...`: as cheap
# as the positional tuples they replace (a slot read is an index into the object), and the
# type checker knows each branch's fields.


@dataclass(frozen=True, slots=True)
class WorkOp:
    """Local work (or the CPU of a thread kind): the worker is busy for `seconds()`."""

    seconds: Callable[[], float]


@dataclass(frozen=True, slots=True)
class DbOp:
    """A query on `pool`, the connection given back after it or kept to the task's end."""

    pool: Pool
    query: Callable[[], float]
    whole_task: bool


@dataclass(frozen=True, slots=True)
class CallOp:
    """`count()` (rounded) calls to `downstream`, each with its retries."""

    downstream: Downstream
    count: Callable[[], float]


@dataclass(frozen=True, slots=True)
class CpuOp:
    """The CPU of a coroutine (executor: async): it holds the worker process's event loop."""

    loop: EventLoop
    seconds: Callable[[], float]


@dataclass(frozen=True, slots=True)
class HangOp:
    """With `probability` (drawn by `roll()`), the attempt blocks for `seconds()`, deaf to
    cancellation."""

    probability: float
    roll: Callable[[], float]
    seconds: Callable[[], float]


Op = WorkOp | DbOp | CallOp | CpuOp | HangOp


@dataclass
class Program:
    """A task's steps, compiled to step records."""

    steps: list[Op]


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
    #: Stuck workers (busy with an attempt whose record moved on): now, at most, and the
    #: time integral of the count (its mean is stuck_area / simulated time).
    stuck: int = 0
    stuck_peak: int = 0
    stuck_area: float = 0.0
    stuck_since: float = 0.0
    replaced: int = 0  # workers started to replace stuck ones
    retired: int = 0  # stuck workers that left when they returned to a full pool
    killed: int = 0  # worker processes killed at a timeout (executor: process)

    def stuck_changed(self, now: float, delta: int) -> None:
        self.stuck_area += self.stuck * (now - self.stuck_since)
        self.stuck_since = now
        self.stuck += delta
        if self.stuck > self.stuck_peak:
            self.stuck_peak = self.stuck


class Slot:
    """One simulated worker (a thread, or the process a `process` kind runs in)."""

    __slots__ = ("number", "proc", "retiring", "stuck")

    def __init__(self, number: int) -> None:
        self.number = number
        self.proc: simpy.Process | None = None
        self.stuck = False
        self.retiring = False


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
        self.limits = scenario.limits()
        kinds = self.limits.kinds
        self.process_kinds = {k for k, spec in kinds.items() if spec.executor == "process"}
        self.overlap_kinds = {k for k, spec in kinds.items() if spec.overlap}
        self.async_kinds = {k for k, spec in kinds.items() if spec.executor == "async"}
        #: The worker process's event loop, when a kind runs on it (lab/simulate/coroutines.py).
        self.loop = EventLoop(self.env, self.limits, self.async_kinds) if self.async_kinds \
            else None
        #: What a scenario does not use costs nothing: renewals only under a lease, and the
        #: bookkeeping that lets a worker give back what it held only when one can be
        #: interrupted (a crash fault, or a `process` kind killed at its timeout).
        self.leased = self.limits.sweeper.lease_s is not None
        self.track = bool(self.process_kinds or self.async_kinds) or any(
            f.kind == "worker_crash" for f in scenario.faults)
        self.metrics = StoreMetrics()
        self.store = LabStore(self.metrics.ended)
        self.metrics.attach(self.store)
        self.scheduler = self._make_scheduler(sinks or [])
        self.pools = {name: Pool(self.env, name, spec) for name, spec in scenario.pools.items()}
        self.downstreams = {name: self._make_downstream(name, spec)
                            for name, spec in scenario.downstreams.items()}
        #: What the claims hold of each bulkhead: a claim's room, as the runtime's claimer's.
        self.holds = BulkheadHolds(self.scheduler.guards, scenario.claim_batch - 1)
        self.business = self._make_business()
        self.programs: list[Program] = []
        self.stats = RunStats()
        self.alerts = self._make_alerts()
        self.idle: dict[simpy.Event, None] = {}
        self.workers: list[simpy.Process] = []
        self.dead: set[int] = set()  # crashed, or retired after being stuck
        self.live = 0  # workers neither dead nor retired (stuck ones included)
        self.stuck_bound = stuck_bound(self.limits)
        #: Tasks whose previous attempt is stuck on a worker: no retry may start meanwhile
        #: (unless their kind allows overlap); every claim skips them.
        self.excluded: set[str] = set()
        self.attempts: dict[str, tuple[Task, Slot]] = {}  # RUNNING attempts in progress
        #: Tasks of thread kinds the loop's claimer claimed, for the next free worker thread.
        self.handed: deque[Task] = deque()
        self.watchdog_due = float("inf")
        self._watchdog: simpy.Process
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
        # The lab simulates the whole fleet as one pool of workers: every limit whole. Guards
        # are added by _make_downstream, which pairs each with its provider. The metrics come
        # from the store, so without a trace (or a caller's sink) no event is built at all.
        return build_scheduler(self.limits, self.store, rng=self.rng("scheduler"),
                               sinks=sinks, whole_fleet=True, downstreams={})

    def _make_downstream(self, name: str, spec: Any) -> Downstream:
        guard = self.scheduler.add_guard(build_guard(name, spec.client, 0.0, whole_fleet=True))
        provider = Provider(self.env, name, spec.provider, self.rng(f"latency:{name}"),
                            self.rng(f"errors:{name}"))
        return Downstream(self.env, name, spec, guard, provider, self.rng(f"retry:{name}"),
                          track=self.track)

    def _make_business(self) -> BusinessTraffic | None:
        spec = self.sc.business
        if spec is None:
            return None
        breaker = None
        if spec.breaker is not None:
            breaker = CircuitBreaker(breaker_config(spec.breaker), "gateway", self._gateway_change)
        return BusinessTraffic(self.env, spec, self.pools[spec.pool], self.rng("business"),
                               self.rng("business-query"), breaker)

    def _gateway_change(self, change: BreakerChange) -> None:
        self.scheduler.emit(Event(change.at, EventKind.BREAKER, None, None, None,
                                  change.src.value, change.dst.value, change.reason, None, None,
                                  "gateway"))

    def _make_alerts(self) -> AlertEvaluator:
        rules = alert_rules(self.limits.alerts, running_limit(self.limits))
        return AlertEvaluator(rules, self.metrics, self.scheduler.emit,
                              p99_baseline_s=self.limits.alerts.p99_baseline_s)

    def _compile(self, steps: list[Step], kind: str) -> Program:
        compiled: list[Op] = []
        loop = self.loop if kind in self.async_kinds else None
        for k, step in enumerate(steps):
            rng = self.rng(f"program:{len(self.programs)}:{k}")
            if isinstance(step, WorkStep):
                compiled.append(WorkOp(step.work.sampler(rng)))
            elif isinstance(step, CpuStep):  # holds the event loop, or just the worker
                cpu = step.cpu.sampler(rng)
                compiled.append(WorkOp(cpu) if loop is None else CpuOp(loop, cpu))
            elif isinstance(step, DbStep):
                db = step.db
                compiled.append(DbOp(self.pools[db.pool], db.query.sampler(rng),
                                     db.hold == "whole_task"))
            elif isinstance(step, CallStep):
                ds = self.downstreams[step.call.downstream]
                compiled.append(CallOp(ds, step.call.count.sampler(rng)))
            elif isinstance(step, HangStep):
                hang = step.hang
                compiled.append(HangOp(hang.probability, rng.random,
                                       hang.duration.sampler(rng)))
        program = Program(compiled)
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
        for at, first, end in arrivals(spec.arrival, spec.count, self.sc.horizon_s,
                                       self.rng(f"arrivals:{spec.id}")):
            if at > env.now:
                yield env.timeout(at - env.now)
            self._submit(make.many(first, end), spec)
        self.arrivals_left -= 1
        self._check_finished()

    def _task_factory(self, spec: BatchSpec) -> TaskFactory:
        self._compile(spec.program, spec.kind)
        index = len(self.programs) - 1
        children = []
        for child in spec.children:
            self._compile(child.program, child.kind)
            children.append(len(self.programs) - 1)
        return TaskFactory(spec, self.sc, index, children, self.seed)

    def _submit(self, specs: list[TaskSpec], batch: BatchSpec) -> None:
        if not specs:
            return
        now = self.env.now
        self.scheduler.submit_many(specs, now, batch_id=batch.id)
        self.stats.submitted += len(specs)
        again = duplicates_of(specs, batch, self.seed)
        if again:
            self.scheduler.submit_many(again, now, batch_id=batch.id)
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

    def _start_worker(self) -> None:
        number = len(self.workers)
        slot = Slot(number)
        slot.proc = self.env.process(self.worker(f"w{number + 1}", slot))
        self.workers.append(slot.proc)
        self.live += 1

    def _claim(self, who: str, now: float, n: int, exclude: set[str]) -> Work | Idle:
        """`Scheduler.claim` within the bulkheads' room (`BulkheadHolds`): no task of a
        downstream whose bulkhead is full of held tasks, no more than the room left."""
        holds = self.holds
        full, room = holds.room()
        answer = self.scheduler.claim(who, now, n if room is None else min(n, room), exclude,
                                      also_blocked=full)
        if answer.__class__ is Work:
            holds.hold(answer.tasks)
        return answer

    def _let_go(self, task: Task) -> None:
        """An attempt holds its bulkheads no more; wake an idle claimer if one was full."""
        if self.holds.let_go(task) and self.idle:
            self._wake(1)

    def worker(self, wid: str, slot: Slot) -> Generator[simpy.Event, Any, None]:
        env = self.env
        claim = self._claim if self.holds else self.scheduler.claim
        n = self.sc.claim_batch
        excluded = self.excluded
        handed = self.handed
        async_kinds = self.async_kinds
        sleeping: simpy.Event | None = None
        answer: Work | Idle
        left: deque[Task] = deque()  # claimed, not yet begun (claim_batch > 1)
        try:
            while True:
                if handed:  # claimed by the event loop's claimer for a thread
                    answer = Work([handed.popleft()])
                    if not handed:
                        assert self.loop is not None  # only its claimer hands tasks over
                        self.loop.wake()
                else:
                    answer = claim(wid, env.now, n, excluded)
                if answer.__class__ is Work:
                    if self.idle:
                        self._wake(1)  # pass the baton: more may be claimable
                    left.extend(answer.tasks)
                    while left:
                        task = left.popleft()
                        if async_kinds and task.kind in async_kinds:
                            if not self._to_loop(task):  # the loop is full: wait for room
                                assert self.loop is not None  # async kinds run on it
                                yield self.loop.wait_room()
                            continue
                        try:
                            yield from self.run_task(task, slot)
                        except simpy.Interrupt as stop:
                            if stop.cause != KILLED:
                                raise
                            yield env.timeout(self.sc.process_respawn_s)
                    if slot.retiring:
                        self.dead.add(slot.number)
                        return
                else:
                    assert answer.__class__ is Idle
                    sleeping = self._sleep(answer.until)
                    yield sleeping
                    sleeping = None
        except simpy.Interrupt:
            if sleeping is not None:
                self.idle.pop(sleeping, None)
            for task in left:  # a crashed worker's claimed-ahead tasks: orphans now
                self._let_go(task)
            self.dead.add(slot.number)
            self.live -= 1

    def dispatcher(self) -> Generator[simpy.Event, Any, None]:
        """Unbounded workers (open loop): every claimable task starts at once (a task of an
        async kind on the event loop, when it has a slot)."""
        env = self.env
        async_kinds = self.async_kinds
        claim = self._claim if self.holds else self.scheduler.claim
        while True:
            answer = claim("open", env.now, 10_000, self.excluded)
            if answer.__class__ is Work:
                for task in answer.tasks:
                    if async_kinds and task.kind in async_kinds:
                        self._to_loop(task)
                    else:
                        env.process(self._open_attempt(task))
            else:
                assert answer.__class__ is Idle
                yield self._sleep(answer.until)

    def _open_attempt(self, task: Task) -> Generator[simpy.Event, Any, None]:
        """One attempt of the open loop, in its own process (a killed one just ends)."""
        slot = Slot(-1)
        slot.proc = self.env.active_process
        with contextlib.suppress(simpy.Interrupt):
            yield from self.run_task(task, slot)

    # -- the event loop (executor: async; lab/simulate/coroutines.py) ---------------------

    def loop_claimer(self) -> Generator[simpy.Event, Any, None]:
        """The worker process's claimer for its event loop: claims as many tasks as the loop
        has free slots, through the same `claim` as the worker threads, and sleeps as they
        do. A task of a thread kind it claims is handed to the next free worker thread."""
        env = self.env
        loop = self.loop
        assert loop is not None
        claim = self._claim if self.holds else self.scheduler.claim
        excluded = self.excluded
        handed = self.handed
        async_kinds = self.async_kinds
        while True:
            room = loop.room()
            if room <= 0 or handed:
                yield loop.wait_room()
                continue
            answer = claim("loop", env.now, room, excluded)
            if answer.__class__ is Work:
                if self.idle:
                    self._wake(1)  # pass the baton: more may be claimable
                for task in answer.tasks:
                    if task.kind in async_kinds:
                        self._to_loop(task)
                    else:
                        handed.append(task)
                        self._wake(1)
            else:
                assert answer.__class__ is Idle
                yield self._sleep(answer.until)

    def _to_loop(self, task: Task) -> bool:
        """Start a claimed async task as a coroutine, or queue it for a slot (False)."""
        loop = self.loop
        assert loop is not None
        if not loop.queue and loop.fits(task.kind):
            self._start_coroutine(task)
            return True
        loop.queue.append(task)
        return False

    def _start_coroutine(self, task: Task) -> None:
        assert self.loop is not None
        self.loop.take(task.kind)
        slot = Slot(-1)
        slot.proc = self.env.process(self._coroutine(task, slot))

    def _coroutine(self, task: Task, slot: Slot) -> Generator[simpy.Event, Any, None]:
        """One attempt as a coroutine; cancelled at its timeout, it gives its slot back at
        once (no stuck worker), and the oldest queued task that fits takes it."""
        loop = self.loop
        assert loop is not None
        try:
            yield from self.run_task(task, slot)
        except simpy.Interrupt as stop:
            if stop.cause != CANCELLED:
                raise
        loop.give(task.kind)
        while (queued := loop.next_runnable()) is not None:
            self._start_coroutine(queued)

    def run_task(self, task: Task, slot: Slot) -> Generator[simpy.Event, Any, None]:
        """One attempt on `slot`: its steps in order, then `complete`. The DB step is inlined
        (as the calls' admission is in `Downstream.call`): every level of `yield from` is
        paid again on each resume."""
        env = self.env
        stats = self.stats
        stats.attempts += 1
        tid = task.task_id
        self.attempts[tid] = (task, slot)
        started = task.started_at
        assert started is not None  # claimed: RUNNING
        if started + task.timeout + DEADLINE_SLACK_S < self.watchdog_due:
            self.watchdog_due = 0.0  # a deadline before the watchdog's next look: wake it
            self._watchdog.interrupt("deadline")
        if task.version == 1:
            stats.first_waits.append(env.now - task.created_at)
        if started < env.now:  # claimed ahead of its worker
            self._began_late(task, started)
        steps = self.programs[task.payload].steps
        track = self.track
        # What the attempt must give back: connections kept for the whole task, and, when a
        # crash can interrupt the worker (`track`), every wait and connection in progress.
        held: list[tuple[Any, ...]] = []
        error: str | None = None
        last = steps[-1]
        try:
            for step in steps:
                if step.__class__ is WorkOp:
                    yield env.timeout(step.seconds())
                elif step.__class__ is DbOp:
                    pool = step.pool
                    whole = step.whole_task
                    now = env.now
                    if pool.outages and pool.down(now):
                        pool.refused += 1
                        error = DB_UNAVAILABLE
                    elif pool.bulkhead.try_acquire_nowait():
                        pool.waits.append(0.0)
                    else:
                        event = pool.wait_event(now)
                        if track:
                            held.append(("poolwait", pool, event))
                        granted = yield event
                        if track:
                            held.pop()
                        if self.detail is not None:
                            self._pool_waited(task, pool, granted, now)
                        if not granted:
                            error = POOL_TIMEOUT
                    if error is None:
                        if whole or track:
                            held.append(("conn", pool))
                        seconds = step.query()
                        yield env.timeout(seconds)
                        if self.detail is not None:
                            self._queried(task, pool, seconds, whole)
                        if not whole:
                            if track:
                                held.pop()
                            pool.release()
                elif step.__class__ is CallOp:  # the calls of a step, each with its retries
                    ds = step.downstream
                    for _ in range(int(step.count() + 0.5)):
                        error = yield from ds.call(held, task)
                        if error is not None:
                            break
                elif step.__class__ is CpuOp:  # a coroutine's CPU: it holds the event loop
                    yield from step.loop.cpu(task, step.seconds(), self.detail)
                elif step.__class__ is HangOp and step.roll() < step.probability:
                    yield env.timeout(step.seconds())  # a hang: blocks, deaf to cancellation
                if error is not None or (step is not last and self.scheduler.is_cancelled(task)):
                    break  # cooperative cancel between steps; after the last, complete() tells
        except simpy.Interrupt:
            if self.attempts.get(tid, (None, None))[1] is slot:
                del self.attempts[tid]
            self._abandon(held)
            if self.holds:
                self._let_go(task)
            raise
        if slot.stuck:
            self._returned(task, slot)
        else:
            del self.attempts[tid]
        if self.holds:
            self._let_go(task)
        for entry in reversed(held):
            entry[1].release()
        answer = self.scheduler.complete(task, OK if error is None else Outcome.failure(error),
                                         env.now)
        if answer.__class__ is Completed:
            if answer.task.status is _PENDING and answer.task.retry_count == task.retry_count:
                stats.deferred += 1
            if self.idle:
                self._wake(1)
            if self.arrivals_left == 0:
                self._check_finished()
        else:
            stats.lost_races += 1

    # -- stuck workers -----------------------------------------------------------------------

    def _moved_on(self, moved: list[Task]) -> None:
        """The watchdog or the sweeper moved these RUNNING tasks on. An attempt still in
        progress is killed with its process (executor: process; the worker is back after
        `process_respawn_s`), or keeps its thread busy: stuck until its code returns."""
        for new in moved:
            attempt = self.attempts.pop(new.task_id, None)
            if attempt is None:
                continue  # not in progress here: a crashed worker's orphan
            slot = attempt[1]
            if new.kind in self.process_kinds:
                self.stats.killed += 1
                assert slot.proc is not None
                slot.proc.interrupt(KILLED)
            elif new.kind in self.async_kinds:
                assert self.loop is not None and slot.proc is not None
                self.loop.cancelled += 1
                slot.proc.interrupt(CANCELLED)
            else:
                self._stuck(new, slot)

    def _stuck(self, task: Task, slot: Slot) -> None:
        slot.stuck = True
        if self.holds:  # a stuck attempt holds no bulkhead room (as in the runtime)
            self._let_go(task)
        stats = self.stats
        stats.stuck_changed(self.env.now, +1)
        if task.kind not in self.overlap_kinds:
            self.excluded.add(task.task_id)
        if slot.number >= 0 and replaces_stuck(stats.stuck, self.stuck_bound):  # replacement
            stats.replaced += 1
            self._start_worker()

    def _returned(self, task: Task, slot: Slot) -> None:
        """A stuck attempt's code returned: its task may be retried, and its worker retires
        if the pool is at its target size without it."""
        slot.stuck = False
        stats = self.stats
        stats.stuck_changed(self.env.now, -1)
        self.excluded.discard(task.task_id)
        workers = self.sc.workers  # a number, when the worker is one of a pool (number >= 0)
        if slot.number >= 0 and isinstance(workers, int) and retires_on_return(
                self.live - stats.stuck, workers):
            slot.retiring = True
            stats.retired += 1
            self.live -= 1
        if self.idle:
            self._wake(1)

    def _began_late(self, task: Task, started: float) -> None:
        """An attempt claimed ahead (claim_batch > 1, or an async one that found every
        coroutine slot taken) begins after its claim (`started`): the wait for its worker
        thread or slot is a WAIT and not run time, as in the runtime."""
        now = self.env.now
        waited = now - started
        self.store.waited[task.task_id] = (started, waited)
        if self.detail is not None:
            wait = slot_wait if task.kind in self.async_kinds else thread_wait
            self.detail(wait(task, now, waited))

    def _pool_waited(self, task: Task, pool: Pool, granted: bool, since: float) -> None:
        now = self.env.now
        assert self.detail is not None  # called only when details are recorded
        self.detail(Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id,
                          None, None, "pool" if granted else POOL_TIMEOUT, task.retry_count + 1,
                          task.worker_id, pool.name, now - since))

    def _queried(self, task: Task, pool: Pool, seconds: float, whole: bool) -> None:
        """A query ended (for the trace, as the load test records it)."""
        assert self.detail is not None
        self.detail(Event(self.env.now, EventKind.QUERY, task.task_id, task.batch_id,
                          task.trace_id, None, None, "kept" if whole else "returned",
                          task.retry_count + 1, None, pool.name, seconds))

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

    # -- periodic processes ----------------------------------------------------------------

    def watchdog(self) -> Generator[simpy.Event, Any, None]:
        """Expire overdue tasks, then sleep until the core's next deadline (or the interval):
        the runtime's watchdog, in virtual time. A task that starts with an earlier deadline
        wakes it (`_started`)."""
        env = self.env
        scheduler = self.scheduler
        interval = self.limits.watchdog_interval_s
        while True:
            moved = scheduler.expire(env.now)
            if moved:
                self._moved_on(moved)
                self._wake(1)
                self._check_finished()
            wait = scheduler.watchdog_wait(env.now, interval)
            self.watchdog_due = env.now + wait
            with contextlib.suppress(simpy.Interrupt):  # woken early by a sooner deadline
                yield env.timeout(wait)

    def heartbeat(self, interval: float) -> Generator[simpy.Event, Any, None]:
        """Renew the lease of every attempt in progress, every `interval`: the runtime's
        heartbeat thread. A crashed worker's attempt is no longer in `attempts`, so its lease
        lapses and the sweeper takes the task back, as it would for real."""
        env = self.env
        heartbeat = self.scheduler.heartbeat
        while True:
            yield env.timeout(interval)
            now = env.now
            for task, _ in list(self.attempts.values()):
                heartbeat(task, now)

    def sweeper(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            yield env.timeout(self.sc.sweeper.interval_s)
            moved = self.scheduler.sweep(env.now)
            if moved:
                self._moved_on(moved)
                self._wake(1)
                self._check_finished()

    def sampler(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        interval = self.sc.sample_interval_s
        workers = self.sc.workers if isinstance(self.sc.workers, int) else None
        while True:
            if workers is not None:
                self.metrics.stuck_share = self.stats.stuck / workers
            if self.loop is not None:
                self.metrics.loop_lag = self.loop.interval_lag()
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

    def _thread_kinds_used(self) -> bool:
        """Whether a batch or child runs a kind that is not async (worker threads needed)."""
        kinds = {b.kind for b in self.sc.batches} | {c.kind for b in self.sc.batches
                                                     for c in b.children}
        return not kinds <= self.async_kinds

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
        elif self._thread_kinds_used():
            for _ in range(int(workers)):
                self._start_worker()
        if self.loop is not None:
            env.process(self.loop_claimer())
        self._watchdog = env.process(self.watchdog())
        if self.leased:  # without a lease, renewals change nothing
            env.process(self.heartbeat(heartbeat_interval(self.limits)))
        env.process(self.sweeper())
        env.process(self.sampler())
        if self.sc.faults:
            env.process(self.faults())
        if self.business is not None:
            env.process(self.business.run())
        horizon = env.timeout(self.sc.horizon_s)
        horizon.callbacks.append(self._horizon_reached)
        with collect_rarely():
            env.run(until=self.finished)
        if self.business is not None:
            self.business.stopped = True
        self.stats.stuck_changed(env.now, 0)  # close the stuck count's integral
        self.alerts.evaluate(env.now)
        if self.on_sample is not None:
            self.on_sample(self)
        self.wall_s = time.perf_counter() - started
        return self

    def _horizon_reached(self, _: simpy.Event) -> None:
        if not self.finished.triggered:
            self.finished.succeed()

    def task_records(self) -> list[TaskRecord]:
        """One flat record per task submitted (deduplicated): how each ended, or where it is."""
        return self.store.records()

    @property
    def now(self) -> float:
        return float(self.env.now)

    @property
    def simpy_events(self) -> int:
        """How many simpy events were scheduled: the deterministic measure of cost.

        Read from the repr of simpy's id counter (``count(N)``): `next()` on it would spend
        an id, so reading twice would give two answers and shift later events' ids.
        """
        return int(repr(self.env._eid)[len("count("):-1])



