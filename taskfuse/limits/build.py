"""The one builder from limits to the core's objects: fuses, policies, config, alert rules.

The runtime (`taskfuse worker`, an `App`), the simulator (`lab simulate`) and the load test
all build here, so a limit sized in the lab is the very limit that runs: the same bulkhead
size, the same bucket, the same breaker, the same retry policy and budget, the same alert
thresholds. Fuses hold state, so every driver builds its own objects from the same values.

One difference between drivers is a fact, not a choice: the lab simulates the whole fleet as
one pool of workers, so it builds each limit whole (`whole_fleet=True`); a worker process
builds its share of a `scope: process` limit split over `instances` processes, and only
queues its own threads in front of a `scope: fleet` limit that the database holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from taskfuse.core.adaptive import AdaptiveLimit, make_adaptive
from taskfuse.core.breaker import BreakerConfig, CircuitBreaker
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.events import EventSink
from taskfuse.core.guard import Guard
from taskfuse.core.metrics import AlertRule, default_rules
from taskfuse.core.ratelimit import TokenBucket
from taskfuse.core.retry import Backoff, RetryBudget, RetryPolicy, RetryThrottle, RetryTokens
from taskfuse.core.scheduler import Scheduler, SchedulerConfig
from taskfuse.core.storeapi import Store
from taskfuse.limits.schema import (
    AdaptiveSpec,
    Alerts,
    BackoffSpec,
    BreakerSpec,
    BudgetSpec,
    ClientLimits,
    Limits,
    RatioBudgetSpec,
    RetrySpec,
)

# -- retries -------------------------------------------------------------------------------


def backoff(spec: BackoffSpec) -> Backoff:
    return Backoff(spec.kind, spec.base, spec.cap, spec.multiplier, spec.jitter)  # type: ignore[arg-type]


def retry_policy(spec: RetrySpec, extra_fatal: frozenset[str] = frozenset()) -> RetryPolicy:
    """The RetryPolicy a retry spec describes; `extra_fatal` adds a driver's own fatal kinds."""
    kw: dict[str, Any] = {}
    if spec.retryable is not None:
        kw["retryable"] = frozenset(spec.retryable)
    fatal = RetryPolicy().fatal if spec.fatal is None else frozenset(spec.fatal)
    return RetryPolicy(spec.max_retry, backoff(spec.backoff), fatal=fatal | extra_fatal,
                       retry_timeouts=spec.retry_timeouts, **kw)


def retry_budget(spec: BudgetSpec | None) -> RetryThrottle | None:
    """A fresh budget (ratio or tokens) for one driver, or None when the spec has none."""
    if spec is None:
        return None
    if isinstance(spec, RatioBudgetSpec):
        return RetryBudget(spec.ratio, spec.window_s, spec.min_per_s)
    return RetryTokens(spec.capacity, spec.cost, spec.refund)


def kind_policies(limits: Limits, extra_fatal: frozenset[str] = frozenset()
                  ) -> dict[str, RetryPolicy]:
    """Per task kind, the policy of the kinds that override the file's `retry`."""
    return {kind: retry_policy(k.retry, extra_fatal)
            for kind, k in limits.kinds.items() if k.retry is not None}


# -- fuses ---------------------------------------------------------------------------------


def breaker_config(spec: BreakerSpec) -> BreakerConfig:
    return BreakerConfig(**spec.model_dump())


def adaptive_limit(spec: AdaptiveSpec, bulkhead: int) -> AdaptiveLimit:
    options = {"latency_threshold_s": spec.latency_threshold_s} if spec.kind == "aimd" else {}
    return make_adaptive(spec.kind, spec.initial or bulkhead, spec.min, spec.max, **options)


def build_guard(name: str, client: ClientLimits, now: float, *, whole_fleet: bool = False,
                breaker_listener: Callable[..., None] | None = None) -> Guard:
    """Fresh fuse objects for one downstream, for one driver.

    `whole_fleet` (the lab): every limit whole. Otherwise (a worker process): a `process`
    scope limit is this process's share (bulkhead // instances, at least 1; rate and burst
    / instances), and a `fleet` scope rate is left to the database's bucket.
    """
    share = 1 if whole_fleet else client.instances
    limit = client.bulkhead
    if limit is not None and share > 1:
        limit = max(1, limit // share)
    bulkhead: Bulkhead[Any] | None = None if limit is None else Bulkhead(limit, name)
    adaptive = None
    if client.adaptive is not None and limit is not None:
        adaptive = adaptive_limit(client.adaptive, limit)
    bucket = None
    rate = client.rate_limit
    if rate is not None and (whole_fleet or client.scope == "process"):
        bucket = TokenBucket(rate.rate / share, max(1.0, rate.burst / share), start=now)
    breaker = None
    if client.breaker is not None:
        breaker = CircuitBreaker(breaker_config(client.breaker), name, breaker_listener)
    return Guard(name, bulkhead=bulkhead, bucket=bucket, breaker=breaker, adaptive=adaptive)


def whole_fleet(limits: Limits) -> Limits:
    """The limits as one process running the whole fleet would hold them: every downstream
    limit whole and in-process (scope process, one instance). The lab's reading of a file
    (`build_guard(..., whole_fleet=True)`), for a runtime that stands for the whole fleet,
    such as the load test."""
    clients = {name: ds.model_copy(update={"client": ds.client.model_copy(
                   update={"scope": "process", "instances": 1})})
               for name, ds in limits.downstreams.items()}
    return limits.model_copy(update={"downstreams": clients})


def call_retry(client: ClientLimits) -> tuple[RetryPolicy, RetryThrottle | None]:
    """The per-call retry policy of a downstream and its (fresh) budget."""
    return retry_policy(client.retry), retry_budget(client.retry.budget)


# -- the scheduler -------------------------------------------------------------------------


def scheduler_config(limits: Limits) -> SchedulerConfig:
    sweeper = limits.sweeper
    return SchedulerConfig(limits.task_timeout_s, sweeper.lease_s, sweeper.max_pending_age_s,
                           limits.max_result_bytes)


def heartbeat_interval(limits: Limits, default: float = 10.0) -> float:
    """How often a worker renews the lease of each task it runs: heartbeat_s, else a third
    of the lease (three renewals may be lost before the sweeper calls it an orphan)."""
    sweeper = limits.sweeper
    if sweeper.heartbeat_s is not None:
        return sweeper.heartbeat_s
    return sweeper.lease_s / 3 if sweeper.lease_s is not None else default


def build_scheduler(limits: Limits, store: Store, *, now: float = 0.0,
                    rng: random.Random | None = None, sinks: Iterable[EventSink] = (),
                    ids: Callable[[], str] | None = None, whole_fleet: bool = False,
                    extra_fatal: frozenset[str] = frozenset(),
                    downstreams: Mapping[str, ClientLimits] | None = None) -> Scheduler:
    """A Scheduler over `store` with the limits' policies, budget, config and guards.

    `downstreams` replaces the file's downstream clients (an App adds those configured in
    code); by default every downstream of the file gets its guard.
    """
    clients = downstreams if downstreams is not None else {
        name: ds.client for name, ds in limits.downstreams.items()}
    scheduler = Scheduler(
        store,
        policy=retry_policy(limits.retry, extra_fatal),
        policies=kind_policies(limits, extra_fatal),
        config=scheduler_config(limits),
        rng=rng,
        sinks=sinks,
        budget=retry_budget(limits.retry.budget),
        ids=ids,
    )
    for name, client in clients.items():
        scheduler.add_guard(build_guard(name, client, now, whole_fleet=whole_fleet))
    return scheduler


# -- workers -------------------------------------------------------------------------------


def stuck_bound(limits: Limits) -> int:
    """How many stuck worker threads a runner replaces: `stuck_threads_max`, else as many as
    there are workers (an unbounded pool has nothing to replace)."""
    if limits.stuck_threads_max is not None:
        return limits.stuck_threads_max
    return limits.workers if isinstance(limits.workers, int) else 0


# -- alerts --------------------------------------------------------------------------------


def running_limit(limits: Limits) -> float:
    """The running count above which the first alert fires: the file's, else the workers
    (and the coroutines of a worker's event loop, when a kind runs on it: those are
    RUNNING too, without a thread each)."""
    if limits.alerts.running_limit is not None:
        return limits.alerts.running_limit
    if not isinstance(limits.workers, int):
        return 1e9
    if any(kind.executor == "async" for kind in limits.kinds.values()):
        return float(limits.workers + limits.async_concurrency)
    return float(limits.workers)


def alert_rules(alerts: Alerts, limit: float) -> list[AlertRule]:
    """The source's alerts with the thresholds of `alerts` (the one copy of them)."""
    return default_rules(
        limit,
        running_for_s=alerts.running_for_s,
        queue_depth=alerts.queue_depth,
        queue_for_s=alerts.queue_for_s,
        success_rate=alerts.success_rate,
        p99_ratio=alerts.p99_ratio,
        min_finished=alerts.min_finished,
        stuck_share=alerts.stuck_share,
        stuck_for_s=alerts.stuck_for_s,
        loop_lag_s=alerts.loop_lag_s,
        loop_lag_for_s=alerts.loop_lag_for_s,
    )
