"""A real run seen through the shape of a finished Simulation, in scenario seconds.

`lab.simulate.report.build_report` and `lab.simulate.timeline.TimelineRecorder` read a Simulation's
attributes (metrics, stats, downstreams with their guards and counters, pools, business,
alerts). Presenting the load test in that same shape lets both be reused unchanged, so a
load-test report has exactly the keys of a simulation report and its trace the same
series. The runtime's fuses live on the wall clock; the small proxies here translate the
scenario-second `now` the readers pass in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.loadtest.client import CallStats
from lab.loadtest.clock import Clock
from lab.loadtest.pools import RealPool
from lab.scenario import Scenario
from lab.simulate.sim import RunStats
from lab.simulate.simstore import TaskRecord, record_of
from taskfuse.core.breaker import BreakerState, CircuitBreaker
from taskfuse.core.guard import Guard
from taskfuse.core.metrics import AlertEvaluator, MetricsAggregator
from taskfuse.core.ratelimit import TokenBucket
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import Store


class ScaledBreaker:
    """A runtime breaker read at scenario times."""

    def __init__(self, breaker: CircuitBreaker, clock: Clock) -> None:
        self._b = breaker
        self._clock = clock

    @property
    def opens(self) -> int:
        return self._b.opens

    def state(self, now: float) -> BreakerState:
        return self._b.state(self._clock.to_wall(now))

    def reopen_at(self) -> float | None:
        at = self._b.reopen_at()
        return None if at is None else self._clock.from_wall(at)


class ScaledBucket:
    def __init__(self, bucket: TokenBucket, clock: Clock) -> None:
        self._b = bucket
        self._clock = clock

    def tokens(self, now: float) -> float:
        return self._b.tokens(self._clock.to_wall(now))


class ScaledGuard:
    """The parts of a Guard the report and timeline read, at scenario times."""

    def __init__(self, guard: Guard, clock: Clock) -> None:
        self.name = guard.name
        self.bulkhead = guard.bulkhead
        self.breaker = ScaledBreaker(guard.breaker, clock) if guard.breaker else None
        self.bucket = ScaledBucket(guard.bucket, clock) if guard.bucket else None


class DownstreamView:
    """A downstream as the report sees it: the client's counters, its guard, the provider."""

    def __init__(self, stats: CallStats, guard: ScaledGuard) -> None:
        self._stats = stats
        self.guard = guard
        self.provider = _Provider()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stats, name)


@dataclass
class _Provider:
    abandoned: int = 0  # filled from the servers' own counts at the end


class PoolView:
    def __init__(self, pool: RealPool) -> None:
        self._pool = pool
        self.name = pool.name
        self.size = pool.spec.size
        self.bulkhead = pool.stats  # what the report reads: max_in_use

    @property
    def waits(self) -> list[float]:
        return self._pool.stats.waits

    @property
    def timeouts(self) -> int:
        return self._pool.stats.timeouts

    @property
    def in_use(self) -> int:
        return self._pool.stats.in_use

    @property
    def waiting(self) -> int:
        return self._pool.waiting


class StoreView:
    """The store's reads the report and timeline use, with every status present."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def all_tasks(self) -> list[Any]:
        return self._store.all_tasks()

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        counts = self._store.counts(batch_id)
        return {s: counts.get(s, 0) for s in TaskStatus}


@dataclass
class _Scheduler:
    store: StoreView


Stats = RunStats  # the simulator's counters, filled from the real run


@dataclass
class RunView:
    """What build_report and TimelineRecorder read; times in scenario seconds."""

    sc: Scenario
    seed: int
    clock: Clock
    metrics: MetricsAggregator
    alerts: AlertEvaluator
    scheduler: _Scheduler
    downstreams: dict[str, DownstreamView]
    pools: dict[str, PoolView]
    business: Any
    workers: list[int]
    stats: Stats = field(default_factory=Stats)
    dead: set[int] = field(default_factory=set)
    ended_at: float | None = None
    stopped_at: float | None = None
    simpy_events: int = 0  # a real run has no simpy events
    loop: None = None  # the report's event loop section: the simulator's model only

    def task_records(self) -> list[TaskRecord]:
        """One flat record per task, as `Simulation.task_records` gives them."""
        return [record_of(t) for t in self.scheduler.store.all_tasks()]

    @property
    def now(self) -> float:
        return self.stopped_at if self.stopped_at is not None else self.clock.now()


def make_view(sc: Scenario, seed: int, clock: Clock, store: Store, guards: dict[str, Guard],
              calls: dict[str, CallStats], pools: dict[str, RealPool], business: Any,
              metrics: MetricsAggregator, alerts: AlertEvaluator, workers: int) -> RunView:
    """Assemble the view over the live parts of a run (read while it goes, and after)."""
    return RunView(
        sc=sc, seed=seed, clock=clock, metrics=metrics, alerts=alerts,
        scheduler=_Scheduler(StoreView(store)),
        downstreams={name: DownstreamView(calls[name], ScaledGuard(guards[name], clock))
                     for name in sc.downstreams},
        pools={name: PoolView(pool) for name, pool in pools.items()},
        business=business, workers=list(range(workers)),
    )
