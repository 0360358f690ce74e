"""The limits file: every knob a person sizes in the lab and deploys to `taskfuse worker`.

A limits file is the deployable half of a lab scenario, with the same key names at the same
paths, so a scenario's limits can be cut out into a file, and a file pulled back into a
scenario (`limits: FILE`), without renaming anything::

    workers: 10                         # worker threads (per process)
    stuck_threads_max: 10               # stuck threads replaced (default: workers)
    task_timeout_s: 120
    retry: {max_retry: 2, backoff: {kind: exponential, base: 1.0, cap: 30, jitter: full}}
    kinds:                              # per task kind
      sync_sku: {timeout_s: 30, executor: thread, overlap: false}
      fetch_price: {executor: async, async_concurrency: 2000}
    async_concurrency: 1000             # async tasks in flight per worker process
    sweeper: {interval_s: 30, lease_s: 30, retention_s: 604800}
    max_result_bytes: 1048576           # a larger result fails its task (null: no bound)
    pools:                              # connection-limited sections (ctx.pool(name))
      batch: {size: 10, acquire_timeout_s: 30}
    downstreams:                        # the client's fuses around each downstream
      partner:
        client:
          timeout_s: 1.0
          bulkhead: 14
          rate_limit: {rate: 90, burst: 10}
          breaker: {failure_rate: 0.5, open_wait_s: 5}
          retry: {max_retry: 5, backoff: {kind: exponential, base: 0.5, cap: 8}}
    batches:
      - {id: skus, cap: 50}

Models are strict (an unknown key is an error) and frozen. The builder from these values to
the core's objects is `taskfuse.limits.build`: the one place the runtime, the simulator and
the load test turn limits into fuses, policies and alert rules.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from taskfuse.core import bounds
from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.scheduler import DEFAULT_MAX_RESULT_BYTES
from taskfuse.limits.schedules import ScheduleLimits, ScheduleName

# The one validated number type of every duration and count (taskfuse.core.bounds has the
# bounds and why): finite, within stated bounds, and strict, so `workers: true` is refused
# rather than read as 1 (a whole number in a float's place is fine: `timeout_s: 30`).
#: A duration: a timeout, a wait, a lease (1 ms to 30 days).
Duration = Annotated[float, Field(strict=True, ge=bounds.MIN_DURATION_S,
                                  le=bounds.MAX_DURATION_S)]
#: The period of a loop that touches the store: a heartbeat, the watchdog, the sweeper.
Period = Annotated[float, Field(strict=True, ge=bounds.MIN_PERIOD_S, le=bounds.MAX_DURATION_S)]
#: A duration that may be zero (a backoff, how long an alert's condition must hold).
Offset = Annotated[float, Field(strict=True, ge=0, le=bounds.MAX_DURATION_S)]
#: The largest rate, size or ratio a file may give (far above any real one; finite).
MAX_NUMBER = 1e9
#: A positive rate, size or factor: a millionth (bounds.MIN_POSITIVE) to MAX_NUMBER.
PosFloat = Annotated[float, Field(strict=True, ge=bounds.MIN_POSITIVE, le=MAX_NUMBER)]
NonNeg = Annotated[float, Field(strict=True, ge=0, le=MAX_NUMBER)]
PosInt = Annotated[int, Field(strict=True, ge=1, le=int(MAX_NUMBER))]
#: A count that may be zero (tasks of a batch, an SLO's allowed failures).
Count = Annotated[int, Field(strict=True, ge=0, le=int(MAX_NUMBER))]
#: A share or a probability: 0 to 1.
Ratio = Annotated[float, Field(strict=True, ge=0, le=1)]
#: A mean drawn around (a latency, a service time): a millionth of a second to 30 days.
Mean = Annotated[float, Field(strict=True, ge=bounds.MIN_POSITIVE, le=bounds.MAX_DURATION_S)]
#: A seed of the random streams: what numpy and a trace file's name take (0 to 2^63 - 1).
Seed = Annotated[int, Field(strict=True, ge=0, le=bounds.MAX_INT64)]
Retries = Annotated[int, Field(strict=True, ge=0, le=bounds.MAX_RETRY)]
Priority = Annotated[int, Field(strict=True, ge=bounds.MIN_INT64, le=bounds.MAX_INT64)]

#: The largest worker count a file may ask for: beyond it a typo (an extra zero or three)
#: would start threads or simulated workers by the hundred thousand.
MAX_WORKERS = 10_000
#: The largest count of coroutines in flight a file may ask for per worker process.
MAX_ASYNC = 100_000
#: The largest result bound a file may set: 256 MiB, PostgreSQL's own limit for one jsonb.
MAX_RESULT_BYTES = 1 << 28


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# -- retries -------------------------------------------------------------------------------


class BackoffSpec(Strict):
    """Delay before retry k: none -> 0; fixed -> base; exponential -> base * multiplier^(k-1),
    capped at cap; then jitter: none, full (uniform 0..d), equal (d/2 + uniform 0..d/2),
    decorrelated (uniform base..3 x previous, capped)."""

    kind: Literal["none", "fixed", "exponential"] = "exponential"
    base: Offset = 0.1
    cap: Offset = 30.0
    multiplier: Annotated[float, Field(strict=True, ge=1, le=100)] = 2.0
    jitter: Literal["none", "full", "equal", "decorrelated"] = "full"

    @model_validator(mode="after")
    def _cap(self) -> BackoffSpec:
        if self.cap < self.base:
            raise ValueError(f"cap must be >= base (got cap={self.cap!r}, base={self.base!r})")
        return self


class RatioBudgetSpec(Strict):
    """Retries may be at most `ratio` of the first attempts of the last `window_s` seconds,
    plus min_per_s x window_s (Finagle's and gRPC's retry budget). Each retry is charged
    when it is decided, so a thousand simultaneous failures cannot all pass the check."""

    kind: Literal["ratio"] = "ratio"
    ratio: NonNeg = 0.1
    window_s: Duration = 10.0
    min_per_s: NonNeg = 1.0


class TokenBudgetSpec(Strict):
    """A retry takes `cost` tokens from a bucket of `capacity` and is refused when fewer are
    left; every success puts `refund` back (the AWS SDKs' retry quota, gRPC's retry
    throttling). Under a lasting overload the bucket empties and retries stop altogether
    until successes refill it, which is what lets a metastable overload drain."""

    kind: Literal["tokens"]
    capacity: PosFloat = 500.0
    cost: PosFloat = 5.0
    refund: NonNeg = 1.0


def _budget_kind(value: Any) -> str | None:
    """The union tag of a budget (capitalized: error paths drop such tags, not key names)."""
    kind = value.get("kind", "ratio") if isinstance(value, dict) else getattr(value, "kind", None)
    return {"ratio": "Ratio", "tokens": "Tokens"}.get(str(kind))


BudgetSpec = Annotated[
    Annotated[RatioBudgetSpec, Tag("Ratio")] | Annotated[TokenBudgetSpec, Tag("Tokens")],
    Discriminator(_budget_kind, custom_error_type="budget_kind",
                  custom_error_message="a budget's kind is 'ratio' (default) or 'tokens'"),
]


class RetrySpec(Strict):
    """How failures are retried: attempts = max_retry + 1. `retryable`/`fatal` list error
    kinds (fatal wins); `retry_timeouts` rules task timeouts; `budget` bounds the retries of
    everyone sharing this policy."""

    max_retry: Retries = 3
    backoff: BackoffSpec = BackoffSpec()
    retryable: list[str] | None = None
    fatal: list[str] | None = None
    retry_timeouts: bool = True
    budget: BudgetSpec | None = None


# -- the fuses of one downstream -----------------------------------------------------------


class BreakerSpec(Strict):
    """Open when failures / calls >= failure_rate over the window (after minimum_calls);
    half-open after open_wait_s, letting half_open_probes calls through."""

    failure_rate: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.5
    window: Literal["count", "time"] = "count"
    window_size: PosFloat = 20
    minimum_calls: PosInt = 10
    open_wait_s: Duration = 5.0
    half_open_probes: PosInt = 3
    slow_call_s: Duration | None = None

    @model_validator(mode="after")
    def _buildable(self) -> BreakerSpec:
        BreakerConfig(**self.model_dump())  # its own checks (minimum_calls <= window_size)
        return self


class AdaptiveSpec(Strict):
    """Let the bulkhead's size follow observed latency and errors, within [min, max]."""

    kind: Literal["aimd", "gradient2", "vegas"] = "aimd"
    min: PosInt = 1
    max: PosInt = 100
    initial: PosInt | None = None
    latency_threshold_s: Duration | None = None

    @model_validator(mode="after")
    def _bounds(self) -> AdaptiveSpec:
        if self.max < self.min:
            raise ValueError(f"max must be >= min (got min={self.min!r}, max={self.max!r})")
        return self


class RateSpec(Strict):
    """A token bucket: `rate` calls per second on average, at most `burst` at once."""

    rate: PosFloat
    burst: Annotated[float, Field(strict=True, ge=1, le=MAX_NUMBER)] = 1.0


class ClientLimits(Strict):
    """Our side of a downstream: the fuses around every call to it.

    `timeout_s` is the client's per-call timeout; `retry` the per-call retry policy (inside
    one attempt of the task); `bulkhead` the concurrency cap (or the starting size of an
    `adaptive` one); `rate_limit` the token bucket; `breaker` the circuit breaker.
    `scope: fleet` holds the bulkhead and the rate across every worker process on a
    PostgreSQL store (permits are leases of `lease_s`); `scope: process` with `instances: N`
    gives each of N processes its share. The lab simulates the whole fleet as one pool of
    workers, so there both scopes mean the total limit.
    """

    timeout_s: Duration | None = None
    bulkhead: PosInt | None = None
    rate_limit: RateSpec | None = None
    breaker: BreakerSpec | None = None
    adaptive: AdaptiveSpec | None = None
    retry: RetrySpec = RetrySpec(max_retry=0)
    scope: Literal["process", "fleet"] = "process"
    instances: PosInt = 1
    lease_s: Period = 30.0

    @model_validator(mode="after")
    def _coherent(self) -> ClientLimits:
        if self.adaptive is not None and self.bulkhead is None:
            raise ValueError("adaptive needs a bulkhead (its initial size)")
        if self.scope == "fleet" and self.instances != 1:
            raise ValueError("instances is for scope 'process'; a fleet limit is already shared")
        if self.scope == "fleet" and self.bulkhead is None and self.rate_limit is None:
            raise ValueError("scope 'fleet' needs a bulkhead or a rate_limit to share")
        return self


class DownstreamLimits(Strict):
    client: ClientLimits = ClientLimits()


# -- pools, batches, kinds -----------------------------------------------------------------


class PoolLimits(Strict):
    """A connection-limited section: at most `size` holders, FIFO; a wait longer than
    acquire_timeout_s fails the step with `pool_timeout`. Keeps batch work off the business
    pool (`ctx.pool("batch")` in task code, or size your own pool from it)."""

    size: Annotated[int, Field(strict=True, ge=1, le=MAX_WORKERS)]
    acquire_timeout_s: Duration = 30.0


class BatchLimits(Strict):
    """Per batch id: how many of its tasks may run at once, and its tasks' defaults."""

    id: str
    cap: PosInt | None = None
    priority: Priority = 0
    timeout_s: Duration | None = None
    max_retry: Retries | None = None


class KindLimits(Strict):
    """Per task kind: its timeout, attempts, priority, retry policy and executor.

    `executor: async` runs an `async def` task as a coroutine on the worker process's one
    event loop: a task waiting on a call holds no thread, so thousands fit in one process
    (bounded by `async_concurrency` here and per worker); its timeout and cancel are a real
    cancel (CancelledError at its next await).
    `executor: process` runs the kind in a worker process that is killed on timeout or
    cancel (for code that may hang); `thread` (default) in the worker thread itself, which
    cannot be killed: a timed-out attempt that ignores cancellation keeps its thread busy
    ("stuck") until its code returns. `overlap: true` lets a retry of such an attempt start
    while the previous one is still stuck (safe only for idempotent work); by default it
    waits until the stuck attempt returns.
    """

    timeout_s: Duration | None = None
    max_retry: Retries | None = None
    priority: Priority | None = None
    retry: RetrySpec | None = None
    executor: Literal["thread", "process", "async"] = "thread"
    overlap: bool = False
    #: Coroutines of this kind in flight at once per worker process (async executor only;
    #: None: bounded by the worker's `async_concurrency` alone).
    async_concurrency: Annotated[int, Field(strict=True, ge=1, le=MAX_ASYNC)] | None = None

    @model_validator(mode="after")
    def _async_cap_is_for_async(self) -> KindLimits:
        if self.async_concurrency is not None and self.executor != "async":
            raise ValueError(f"async_concurrency applies to executor: async only (this kind's "
                             f"executor is {self.executor!r})")
        return self


class Sweeper(Strict):
    """The orphan sweeper's rules, and the lease the workers keep.

    A RUNNING task whose lease (renewed every heartbeat_s, default lease_s / 3) is older than
    lease_s is an orphan; PENDING longer than max_pending_age_s is CANCELED. With
    retention_s, each pass also deletes ended tasks that finished longer ago than that (in
    chunks, never one a live dependent needs: taskfuse.runtime.retention).
    """

    interval_s: Period = 30.0
    lease_s: Period | None = None
    heartbeat_s: Period | None = None
    max_pending_age_s: Duration | None = None
    retention_s: Duration | None = None

    @model_validator(mode="after")
    def _beat_within_lease(self) -> Sweeper:
        if self.heartbeat_s is not None and self.lease_s is not None \
                and self.heartbeat_s >= self.lease_s:
            raise ValueError(f"heartbeat_s must be < lease_s (got heartbeat_s="
                             f"{self.heartbeat_s!r}, lease_s={self.lease_s!r})")
        return self


class Alerts(Strict):
    """The source's four alerts, the stuck-threads and the loop-lag ones; thresholds are
    configuration."""

    running_limit: PosFloat | None = None
    running_for_s: Offset = 300.0
    queue_depth: NonNeg = 500
    queue_for_s: Offset = 600.0
    success_rate: Ratio = 0.95
    min_finished: Annotated[int, Field(strict=True, ge=0, le=int(MAX_NUMBER))] = 20
    p99_ratio: PosFloat = 2.0
    p99_baseline_s: dict[str, Duration] = Field(default_factory=dict)
    stuck_share: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.25
    stuck_for_s: Offset = 60.0
    #: The async executor's event loop lag (seconds) above which, held `loop_lag_for_s`,
    #: the loop-lag alert fires.
    loop_lag_s: PosFloat = 0.1
    loop_lag_for_s: Offset = 60.0


Workers = Annotated[int, Field(strict=True, ge=1, le=MAX_WORKERS)] | Literal["unbounded"]


class Limits(Strict):
    """Everything deployable: workers, the task lifecycle's policies, the fuses, the pools."""

    workers: Workers = 10
    #: How many stuck worker threads the runner replaces with new ones (None: as many as
    #: `workers`); past it, every further stuck thread shrinks the pool until one returns.
    stuck_threads_max: Annotated[int, Field(strict=True, ge=0, le=MAX_WORKERS)] | None = None
    #: Tasks a worker thread holds at once, the one it runs and claim_batch - 1 claimed ahead
    #: (RUNNING from their claim), in the lab and the runtime alike; the runtime prefetches
    #: more on its own while tasks are short (scenarios/README.md).
    claim_batch: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 1
    #: Tasks of `executor: async` kinds in flight at once per worker process, on its one
    #: event loop (each kind may cap its own share lower).
    async_concurrency: Annotated[int, Field(strict=True, ge=1, le=MAX_ASYNC)] = 1000
    watchdog_interval_s: Period = 1.0
    task_timeout_s: Duration = 60.0
    retry: RetrySpec = RetrySpec()
    kinds: dict[str, KindLimits] = Field(default_factory=dict)
    sweeper: Sweeper = Sweeper()
    alerts: Alerts = Alerts()
    pools: dict[str, PoolLimits] = Field(default_factory=dict)
    downstreams: dict[str, DownstreamLimits] = Field(default_factory=dict)
    batches: list[BatchLimits] = Field(default_factory=list)
    #: Batches submitted on a cron schedule, by name (taskfuse.limits.schedules).
    schedules: dict[ScheduleName, ScheduleLimits] = Field(default_factory=dict)
    #: The largest result a task may store, in bytes of compact JSON (null: no bound): a
    #: larger one ends the task FAILED with result_too_large and both sizes in its error,
    #: instead of a row too large to write or to read back.
    max_result_bytes: Annotated[int, Field(strict=True, ge=1, le=MAX_RESULT_BYTES)] | None = (
        DEFAULT_MAX_RESULT_BYTES)

    @field_validator("batches")
    @classmethod
    def _batch_ids_unique(cls, batches: list[BatchLimits]) -> list[BatchLimits]:
        seen: set[str] = set()
        for batch in batches:
            if batch.id in seen:
                raise ValueError(f"batch id {batch.id!r} is listed twice")
            seen.add(batch.id)
        return batches

    def batch(self, batch_id: str | None) -> BatchLimits | None:
        """The limits of one batch id, if the file names it."""
        return next((b for b in self.batches if b.id == batch_id), None)


#: The keys a limits file may hold below each mapping that a scenario shares with it: what a
#: scenario keeps of its own there (a pool's outages, a downstream's provider, a batch's
#: program) is the world's.
LIMITS_KEYS: dict[str, tuple[str, ...]] = {
    "": tuple(Limits.model_fields),
    "pools": tuple(PoolLimits.model_fields),
    "downstreams": tuple(DownstreamLimits.model_fields),
    "batches": tuple(k for k in BatchLimits.model_fields if k != "id"),
}
