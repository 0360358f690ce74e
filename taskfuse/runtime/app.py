"""The registry of a taskfuse application: task functions by kind, and the fuses per downstream.

An `App` is configuration only; it never runs anything. Several runners (threads in one
process, worker processes started by `taskfuse worker --app module:app`) build their own
`Scheduler` and guards from the same App, because fuses are stateful objects that each
driver owns::

    app = App()
    app.downstream("partner", bulkhead=14, rate=100, burst=20, breaker=BreakerConfig())

    @app.task("sync_sku", timeout=30, downstreams=("partner",))
    def sync_sku(ctx, payload):
        with ctx.downstream("partner"):
            return call_partner(payload["sku"])

Fleet-wide limits. A partner's limits are for everyone who calls it, but the fuses above live
in one process: four workers with ``bulkhead=14`` allow 56 calls at once. Two ways out:

* ``scope="fleet"`` (PostgreSQL stores only): the bulkhead and the rate are shared by every
  runner on the database, as leased permit rows and one token bucket row
  (`taskfuse.store.limits`). A killed worker's permit expires after ``lease_s``; a release
  wakes waiters in every process. The fleet bulkhead and bucket *replace* the in-process
  bucket and *add to* an in-process bulkhead of the same size, which only queues this
  process's threads (FIFO, and at most ``bulkhead`` of them asking the database); the breaker
  stays per process. Any other store is refused when the Runner is built, naming the
  downstream.
* ``scope="process"`` with ``instances=N`` (any store): each process takes its share,
  bulkhead ``floor(limit / N)`` (at least 1) and rate / N. No coordination, but N must follow
  the deployment's size.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from taskfuse.core.breaker import BreakerConfig, CircuitBreaker
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.events import EventSink
from taskfuse.core.guard import Guard
from taskfuse.core.ratelimit import TokenBucket
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Scheduler, SchedulerConfig
from taskfuse.core.storeapi import Store
from taskfuse.core.task import TaskSpec
from taskfuse.runtime.errors import RUNTIME_FATAL, RuntimeConfigError, UnknownKind
from taskfuse.runtime.fleet import FleetLimits, build_fleet
from taskfuse.runtime.procexec import EXECUTORS, fn_reference
from taskfuse.runtime.procworker import SERIALIZERS

F = TypeVar("F", bound=Callable[..., Any])
Scope = Literal["process", "fleet"]
Executor = Literal["thread", "process"]
Serializer = Literal["json", "pickle"]

#: A worker renews the lease of each task it runs every DEFAULT_LEASE_S / 3 seconds; the
#: sweeper treats a task whose lease is older than this as orphaned.
DEFAULT_LEASE_S = 30.0


@dataclass(frozen=True, slots=True)
class TaskDef:
    """A registered task function and the defaults its submissions get."""

    kind: str
    fn: Callable[..., Any]
    timeout: float | None = None
    max_retry: int | None = None
    downstreams: tuple[str, ...] = ()
    priority: int = 0
    #: "thread": runs on the worker thread; "process": in a task process that can be killed
    #: (taskfuse.runtime.procexec), its payload and result crossing as `serializer`.
    executor: Executor = "thread"
    serializer: Serializer = "json"


@dataclass(frozen=True, slots=True)
class DownstreamConfig:
    """The fuses of one downstream; each is optional (None: that fuse is off)."""

    name: str
    bulkhead: int | None = None
    rate: float | None = None
    burst: float | None = None
    breaker: BreakerConfig | None = None
    #: "process": the limits hold per driver; "fleet": across every process on PostgreSQL.
    scope: Scope = "process"
    #: With scope "process": how many processes share the limits (each takes its share).
    instances: int = 1
    #: With scope "fleet": how long a dead holder's permit stays blocked (renewed while alive).
    lease_s: float = DEFAULT_LEASE_S

    @property
    def fleet(self) -> bool:
        return self.scope == "fleet"

    def validate(self) -> None:
        """Refuse contradictory options now rather than at the first call (ValueError)."""
        if self.scope not in ("process", "fleet"):
            raise ValueError(f"scope must be 'process' or 'fleet', got {self.scope!r}")
        if self.instances < 1:
            raise ValueError(f"instances must be >= 1, got {self.instances!r}")
        if self.fleet and self.instances != 1:
            raise ValueError("instances is for scope='process'; a fleet limit is already shared")
        if self.fleet and self.bulkhead is None and self.rate is None:
            raise ValueError("scope='fleet' needs a bulkhead or a rate to share")
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {self.lease_s!r}")
        self.build(0.0)

    def build(self, now: float) -> Guard:
        """Fresh fuse objects for one driver (they hold state, so drivers never share them).

        Limits are this process's share; for a fleet scope the in-process bulkhead only
        queues local threads and the bucket is the fleet's (see the module doc).
        """
        limit = self.bulkhead
        if limit is not None and self.instances > 1:
            limit = max(1, limit // self.instances)
        bulkhead = None if limit is None else Bulkhead[Any](limit, self.name)
        bucket = None
        if self.rate is not None and not self.fleet:
            burst = max(1.0, (self.burst or 1.0) / self.instances)
            bucket = TokenBucket(self.rate / self.instances, burst, start=now)
        breaker = CircuitBreaker(self.breaker, self.name) if self.breaker is not None else None
        return Guard(self.name, bulkhead=bulkhead, bucket=bucket, breaker=breaker)


class App:
    """Task functions by kind, downstream fuses by name, and the scheduling policy."""

    def __init__(
        self,
        name: str = "taskfuse",
        *,
        policy: RetryPolicy | None = None,
        default_timeout: float = 60.0,
        lease_s: float | None = DEFAULT_LEASE_S,
        max_pending_age_s: float | None = None,
    ) -> None:
        self.name = name
        self.policy = _with_runtime_fatal(policy or RetryPolicy())
        self.policies: dict[str, RetryPolicy] = {}
        self.config = SchedulerConfig(default_timeout, lease_s, max_pending_age_s)
        self.tasks: dict[str, TaskDef] = {}
        self.downstreams: dict[str, DownstreamConfig] = {}

    def __repr__(self) -> str:
        kinds, downstreams = sorted(self.tasks), sorted(self.downstreams)
        return f"App({self.name!r}, kinds={kinds}, downstreams={downstreams})"

    # -- registration ----------------------------------------------------------------------

    def task(
        self,
        kind: str,
        *,
        timeout: float | None = None,
        max_retry: int | None = None,
        downstreams: Sequence[str] = (),
        priority: int = 0,
        policy: RetryPolicy | None = None,
        executor: Executor = "thread",
        serializer: Serializer | None = None,
    ) -> Callable[[F], F]:
        """Register `fn(ctx, payload)` for `kind`; the function is returned unchanged.

        ``executor="process"`` runs it in a task process that is killed when the attempt
        must stop (a timeout, a cancel), for work that may hang without looking at `ctx`;
        its payload and result cross as ``serializer`` ("json", the default, or "pickle").
        """
        if kind in self.tasks:
            raise RuntimeConfigError(f"kind {kind!r} is already registered")
        _check_executor(kind, executor, serializer)

        def register(fn: F) -> F:
            if executor == "process":  # refused here, not in a task process at the first run
                fn_reference(kind, fn)
            self.tasks[kind] = TaskDef(kind, fn, timeout, max_retry, tuple(downstreams), priority,
                                       executor, serializer or "json")
            if policy is not None:
                self.policies[kind] = _with_runtime_fatal(policy)
            return fn

        return register

    def downstream(
        self,
        name: str,
        *,
        bulkhead: int | None = None,
        rate: float | None = None,
        burst: float | None = None,
        breaker: BreakerConfig | None = None,
        scope: Scope = "process",
        instances: int = 1,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> DownstreamConfig:
        """Configure the fuses of a downstream; validated now, built per driver later.

        `bulkhead`, `rate` and `burst` are the downstream's limits. ``scope="fleet"`` holds
        them across all processes on a PostgreSQL store; ``instances=N`` gives each of N
        processes its share instead (see the module doc).
        """
        config = DownstreamConfig(name, bulkhead, rate, burst, breaker, scope, instances, lease_s)
        try:
            config.validate()
        except ValueError as exc:
            raise RuntimeConfigError(f"downstream {name!r}: {exc}") from None
        self.downstreams[name] = config
        return config

    # -- lookups ---------------------------------------------------------------------------

    def definition(self, kind: str) -> TaskDef:
        """The registration of `kind`; raises UnknownKind."""
        try:
            return self.tasks[kind]
        except KeyError:
            raise UnknownKind(kind, list(self.tasks)) from None

    def spec(self, kind: str, payload: Any = None, **fields: Any) -> TaskSpec:
        """A TaskSpec for a registered kind, with its registered defaults filled in."""
        d = self.definition(kind)
        fields.setdefault("timeout", d.timeout)
        fields.setdefault("max_retry", d.max_retry)
        fields.setdefault("downstreams", d.downstreams)
        fields.setdefault("priority", d.priority)
        return TaskSpec(kind, payload, **fields)

    # -- building a driver's core ----------------------------------------------------------

    def fleet_limits(self, store: Store) -> dict[str, FleetLimits]:
        """The fleet-scoped fuses on `store`; RuntimeConfigError if it cannot hold them."""
        return {ds.name: build_fleet(ds, store) for ds in self.downstreams.values() if ds.fleet}

    def scheduler(
        self,
        store: Store,
        *,
        sinks: Iterable[EventSink] = (),
        now: float = 0.0,
        rng: random.Random | None = None,
        config: SchedulerConfig | None = None,
    ) -> Scheduler:
        """A Scheduler over `store` with this app's policies and fresh guards.

        Task ids and trace ids come from the OS's randomness, because many processes
        submit into one durable store and must never mint the same id.
        """
        sched = Scheduler(
            store,
            policy=self.policy,
            policies=self.policies,
            config=config or self.config,
            rng=rng if rng is not None else random.Random(secrets.randbits(64)),
            sinks=sinks,
            ids=new_task_id,
        )
        for ds in self.downstreams.values():
            sched.add_guard(ds.build(now))
        return sched


def _check_executor(kind: str, executor: str, serializer: str | None) -> None:
    if executor not in EXECUTORS:
        raise RuntimeConfigError(f"kind {kind!r}: executor must be one of "
                                 f"{', '.join(EXECUTORS)}, got {executor!r}")
    if serializer is None:
        return
    if executor != "process":
        raise RuntimeConfigError(f"kind {kind!r}: serializer is for executor='process' (a "
                                 f"thread task's payload and result never leave the process)")
    if serializer not in SERIALIZERS:
        raise RuntimeConfigError(f"kind {kind!r}: serializer must be one of "
                                 f"{', '.join(SERIALIZERS)}, got {serializer!r}")


def new_task_id() -> str:
    """A task id no other process will mint: 80 random bits as 20 hex digits."""
    return secrets.token_hex(10)


def _with_runtime_fatal(policy: RetryPolicy) -> RetryPolicy:
    """The policy with the runtime's own unfixable kinds (unknown kind, bad config) fatal."""
    return replace(policy, fatal=policy.fatal | RUNTIME_FATAL)
