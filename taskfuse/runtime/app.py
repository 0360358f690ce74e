"""The registry of a taskfuse application: task functions by kind, and the limits they run with.

An `App` is configuration only; it never runs anything. Its limits are one `Limits` value,
the very model of a limits file (`taskfuse.limits`): the file a person sized in the lab
(`lab size --write-limits`) is what `taskfuse worker --limits FILE` applies, and what
`App.downstream(...)` configures in code is the same `ClientLimits`. Several runners
(threads in one process, worker processes started by `taskfuse worker --app module:app`)
build their own `Scheduler`, guards, call clients and pool sections from the same App,
through `taskfuse.limits.build`, because fuses are stateful objects that each driver owns::

    app = App.from_limits(load_limits("limits.yaml"), "sync")     # or App("sync") and:
    app.downstream("partner", bulkhead=14, rate=100, burst=20, timeout_s=1.0,
                   retry={"max_retry": 3})

    @app.task("sync_sku", timeout=30, downstreams=("partner",))
    def sync_sku(ctx, payload):
        with ctx.pool("batch"):                                   # a DB connection's turn
            return ctx.downstream("partner").call(fetch, payload["sku"])

Where a value comes from, most specific first: what the caller passes when submitting; the
limits of the task's batch (`batches`); of its kind (`kinds`); what `App.task` registered in
code; the limits' defaults (`task_timeout_s`, `retry`). `configure(limits)` lays a file over
what the code set: every key the file sets wins, keys it leaves out keep the app's values.

Fleet-wide limits. A partner's limits are for everyone who calls it, but the fuses above live
in one process: four workers with ``bulkhead=14`` allow 56 calls at once. Two ways out:

* ``scope="fleet"`` (PostgreSQL stores only): the bulkhead and the rate are shared by every
  runner on the database, as leased permit rows and one token bucket row
  (`taskfuse.store.fleet_limits`). A killed worker's permit expires after ``lease_s``; a release
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

import dataclasses
import inspect
import random
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from taskfuse.configfile import format_validation_error
from taskfuse.core import bounds
from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.events import EventSink
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Scheduler, SchedulerConfig
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Task, TaskSpec
from taskfuse.limits.build import (
    build_scheduler,
    heartbeat_interval,
    retry_policy,
    scheduler_config,
)
from taskfuse.limits.schema import BatchLimits, ClientLimits, Limits, PoolLimits
from taskfuse.runtime.calls import CallClient
from taskfuse.runtime.errors import RUNTIME_FATAL, RuntimeConfigError, UnknownKind
from taskfuse.runtime.fleet_limits import FleetLimits, build_fleet
from taskfuse.runtime.ids import new_task_id
from taskfuse.runtime.pools import PoolSection
from taskfuse.runtime.procexec import EXECUTORS, fn_reference
from taskfuse.runtime.procworker import SERIALIZERS
from taskfuse.runtime.schedules import Schedule, from_limits, periodic_schedule

F = TypeVar("F", bound=Callable[..., Any])
Scope = Literal["process", "fleet"]
Executor = Literal["thread", "process", "async"]
Serializer = Literal["json", "pickle"]
_UNSET: Any = object()

#: A worker renews the lease of each task it runs every DEFAULT_LEASE_S / 3 seconds; the
#: sweeper treats a task whose lease is older than this as orphaned. An App made in code
#: gets it unless told otherwise; an App from a limits file takes the file's sweeper rules.
DEFAULT_LEASE_S = 30.0

#: Key paths whose value is a mapping merged key by key when limits are laid over limits;
#: anything else (a retry policy, a breaker, a rate limit) is replaced whole.
_MERGED = frozenset({("sweeper",), ("alerts",), ("kinds",), ("pools",), ("downstreams",),
                     ("schedules",)})


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
    #: (taskfuse.runtime.procexec), its payload and result crossing as `serializer`;
    #: "async": an `async def` run as a coroutine on the worker's event loop (runtime.aio).
    executor: Executor = "thread"
    serializer: Serializer = "json"


class App:
    """Task functions by kind, and the limits (fuses, pools, policies) they run with."""

    def __init__(
        self,
        name: str = "taskfuse",
        *,
        limits: Limits | None = None,
        policy: RetryPolicy | None = None,
        default_timeout: float | None = None,
        lease_s: float | None = _UNSET,
        max_pending_age_s: float | None = None,
        seed: int | None = None,
    ) -> None:
        self.name = name
        #: With a seed, every random stream (trace ids, backoff jitter) is reproducible:
        #: the lab's load test and differential tests set one; production leaves it None so
        #: processes never jitter in step.
        self.seed = seed
        #: The limits file these limits were read from, when one was (`taskfuse worker
        #: --limits` sets it); a traced run names it in its header.
        self.limits_file: str | None = None
        self.tasks: dict[str, TaskDef] = {}
        self._moved: dict[tuple[str, str], TaskDef] = {}  # kinds the limits move (executor)
        self._policy = policy
        self._policies: dict[str, RetryPolicy] = {}
        self._periodic: dict[str, Schedule] = {}  # schedules declared in code
        code: dict[str, Any] = {}
        if limits is None and lease_s is _UNSET:
            lease_s = DEFAULT_LEASE_S
        if default_timeout is not None:
            code["task_timeout_s"] = default_timeout
        sweeper = {k: v for k, v in (("lease_s", lease_s), ("max_pending_age_s",
                                                             max_pending_age_s))
                   if v is not _UNSET and (v is not None or k == "lease_s")}
        if sweeper:
            code["sweeper"] = sweeper
        base = limits.model_dump(exclude_unset=True) if limits is not None else {}
        self.limits: Limits = _validated(_lay(base, code), f"app {name!r}")

    @classmethod
    def from_limits(cls, limits: Limits, name: str = "taskfuse", *,
                    seed: int | None = None) -> App:
        """An App that runs with `limits` (e.g. `taskfuse.limits.files.load_limits(path)`)."""
        return cls(name, limits=limits, seed=seed)

    def configure(self, limits: Limits) -> App:
        """Lay `limits` over this app's: every key `limits` sets wins, the rest stays.

        Mappings merge by name (a downstream, a pool, a kind configured only in code stays;
        inside a downstream's client each fuse is replaced whole); batches merge by id.
        """
        merged = _lay(self.limits.model_dump(exclude_unset=True),
                      limits.model_dump(exclude_unset=True))
        self.limits = _validated(merged, f"app {self.name!r}")
        return self

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
        executor: Executor | None = None,
        serializer: Serializer | None = None,
    ) -> Callable[[F], F]:
        """Register `fn(ctx, payload)` for `kind`; the function is returned unchanged.

        ``executor="process"`` runs it in a task process that is killed when the attempt
        must stop (a timeout, a cancel), for work that may hang without looking at `ctx`;
        its payload and result cross as ``serializer`` ("json", the default, or "pickle").
        An ``async def`` runs on the worker's event loop (``executor="async"``, the default
        for one): a task waiting on a call holds no thread, and its timeout or cancel
        cancels the coroutine (taskfuse.runtime.aio).
        The limits' `kinds.KIND` entry, when there is one, overrides what is given here.
        """
        if kind in self.tasks:
            raise RuntimeConfigError(f"kind {kind!r} is already registered")
        _check_executor(kind, executor or "thread", serializer)  # refused before decorating
        _check_numbers(kind, timeout, max_retry, priority)

        def register(fn: F) -> F:
            chosen = executor or ("async" if inspect.iscoroutinefunction(fn) else "thread")
            _check_executor(kind, chosen, serializer)
            _check_coroutine(kind, fn, chosen)
            if chosen == "process":  # refused here, not in a task process at the first run
                fn_reference(kind, fn)
            self.tasks[kind] = TaskDef(kind, fn, timeout, max_retry, tuple(downstreams), priority,
                                       chosen, serializer or "json")
            if policy is not None:
                self._policies[kind] = _with_runtime_fatal(policy)
            return fn

        return register

    def periodic(self, cron: str, *, tz: str, name: str | None = None, payload: Any = None,
                 missed: str = "skip", grace_s: float | None = None,
                 cap: int | None = None) -> Callable[[F], F]:
        """Submit a batch at each tick of `cron` read in the zone `tz` (required: explicit).

        On a task (above ``@app.task(KIND)``): one task of KIND per tick, its payload
        `payload` or ``{"schedule": NAME, "tick": ISO}``. On any other function: the function
        builds the batch, ``fn(tick: datetime) -> list[TaskSpec]``. `name` (default: the
        kind, or the function's name) keys each tick's batch, so every worker may submit it
        and exactly one batch per tick gets in. `missed`: "skip" or "run_last_once" for a
        tick missed while no worker ran (`taskfuse.core.ticks`). RuntimeConfigError for a bad
        expression, zone or policy, or a name taken.
        """
        def register(fn: F) -> F:
            kind = next((k for k, d in self.tasks.items() if d.fn is fn), None)
            sname = name or kind or fn.__name__
            doc = {"cron": cron, "tz": tz, "kind": kind or sname, "missed": missed, "cap": cap,
                   **({"grace_s": grace_s} if grace_s is not None else {})}
            limits = _validated({"schedules": {sname: doc}}, f"app {self.name!r}")
            schedule = periodic_schedule(sname, limits.schedules[sname], kind, fn, payload)
            if schedule.name in self._periodic:
                raise RuntimeConfigError(f"schedule {schedule.name!r} is already declared")
            self._periodic[schedule.name] = schedule
            return fn

        return register

    @property
    def schedules(self) -> dict[str, Schedule]:
        """Every schedule by name: those declared in code, and the limits' (which win)."""
        return {**self._periodic, **from_limits(self.limits.schedules)}

    def downstream(
        self,
        name: str,
        *,
        bulkhead: int | None = None,
        rate: float | None = None,
        burst: float | None = None,
        breaker: BreakerConfig | BaseModel | Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        retry: BaseModel | Mapping[str, Any] | None = None,
        adaptive: BaseModel | Mapping[str, Any] | None = None,
        scope: Scope = "process",
        instances: int = 1,
        lease_s: float | None = None,
        client: ClientLimits | None = None,
    ) -> ClientLimits:
        """Configure the fuses of a downstream: the `downstreams.NAME.client` of a limits
        file, in code. Validated now (RuntimeConfigError, one line), built per driver later.

        `bulkhead`, `rate` and `burst` are the downstream's limits; `timeout_s` and `retry`
        the client's per-call timeout and retry policy (`ctx.downstream(name).call`);
        ``scope="fleet"`` holds them across all processes on a PostgreSQL store,
        ``instances=N`` gives each of N processes its share (see the module doc). Or pass a
        whole `client`. A second call for the same name replaces the first.
        """
        if client is None:
            client = _client(name, bulkhead=bulkhead, rate=rate, burst=burst, breaker=breaker,
                             timeout_s=timeout_s, retry=retry, adaptive=adaptive, scope=scope,
                             instances=instances, lease_s=lease_s)
        doc = self.limits.model_dump(exclude_unset=True)
        doc.setdefault("downstreams", {})[name] = {"client": client.model_dump(
            exclude_unset=True)}
        self.limits = _validated(doc, f"downstream {name!r}")
        return client

    def pool(self, name: str, size: int, acquire_timeout_s: float = 30.0) -> PoolLimits:
        """Configure a pool section in code (the `pools.NAME` of a limits file): at most
        `size` holders of `ctx.pool(name)` at once, a wait beyond `acquire_timeout_s` fails."""
        doc = self.limits.model_dump(exclude_unset=True)
        doc.setdefault("pools", {})[name] = {"size": size, "acquire_timeout_s": acquire_timeout_s}
        self.limits = _validated(doc, f"pool {name!r}")
        return self.limits.pools[name]

    # -- what the limits say ---------------------------------------------------------------

    @property
    def downstreams(self) -> dict[str, ClientLimits]:
        """Every downstream's client fuses, by name (one description: the limits')."""
        return {name: ds.client for name, ds in self.limits.downstreams.items()}

    @property
    def policy(self) -> RetryPolicy:
        """The task retry policy: the limits' `retry`, or one given in code when the limits
        do not set it; the runtime's own unfixable kinds are always fatal."""
        if self._policy is not None and "retry" not in self.limits.model_fields_set:
            return _with_runtime_fatal(self._policy)
        return retry_policy(self.limits.retry, RUNTIME_FATAL)

    @property
    def config(self) -> SchedulerConfig:
        return scheduler_config(self.limits)

    @property
    def heartbeat_s(self) -> float:
        """How often a runner renews the leases of its tasks (and held fleet permits)."""
        beat = heartbeat_interval(self.limits)
        for client in self.downstreams.values():
            if client.scope == "fleet":
                beat = min(beat, client.lease_s / 3)
        return beat

    def pool_size(self, name: str) -> int:
        """The size of pool `name` in the limits: size your own connection pool from it
        (`psycopg_pool.ConnectionPool(url, max_size=app.pool_size("batch"))`)."""
        try:
            return self.limits.pools[name].size
        except KeyError:
            raise RuntimeConfigError(f"pool {name!r} is not configured (configured: "
                                     f"{', '.join(sorted(self.limits.pools)) or 'none'})") from None

    def describe(self) -> str:
        """The limits on one line, for the log line a worker starts with."""
        return describe_limits(self.limits)

    # -- lookups and submissions -----------------------------------------------------------

    def definition(self, kind: str) -> TaskDef:
        """The registration of `kind`, with the executor its limits name; raises UnknownKind.

        `kinds.KIND.executor` in a limits file moves a kind to a task process (or back to
        its thread) without a code change: the deployable answer to "this kind may hang".
        """
        try:
            d = self.tasks[kind]
        except KeyError:
            raise UnknownKind(kind, list(self.tasks)) from None
        k = self.limits.kinds.get(kind)
        if k is None or "executor" not in k.model_fields_set or k.executor == d.executor:
            return d
        moved = self._moved.get((kind, k.executor))
        if moved is None or moved.fn is not d.fn:
            _check_coroutine(kind, d.fn, k.executor)
            if k.executor == "process":
                fn_reference(kind, d.fn)
            moved = self._moved[(kind, k.executor)] = replace(d, executor=k.executor)
        return moved

    def process_functions(self) -> list[str]:
        """``module:qualname`` of each kind's function that runs in a task process (as the
        limits place it): what a Runner's task processes import before they claim."""
        return [fn_reference(kind, d.fn) for kind in sorted(self.tasks)
                if (d := self.definition(kind)).executor == "process"]

    def spec(self, kind: str, payload: Any = None, **fields: Any) -> TaskSpec:
        """A TaskSpec for a registered kind, its defaults filled in (see the module doc)."""
        d = self.definition(kind)
        k = self.limits.kinds.get(kind)
        b = self.limits.batch(fields.get("batch_id"))
        fields.setdefault("timeout", _first(b and b.timeout_s, k and k.timeout_s, d.timeout))
        fields.setdefault("max_retry", _first(b and b.max_retry, k and k.max_retry,
                                              d.max_retry))
        fields.setdefault("priority", _first(_batch_priority(b), k and k.priority,
                                             d.priority))
        fields.setdefault("downstreams", d.downstreams)
        return TaskSpec(kind, payload, **fields)

    def submit_to(self, scheduler: Scheduler, specs: Sequence[TaskSpec], now: float,
                  batch_id: str | None = None, *, cap: int | None = None,
                  new_batch: bool = False) -> list[Task]:
        """Submit through `scheduler` with the limits' batch defaults applied.

        A batch the limits name gets its cap (unless `cap` is given) and gives its tasks its
        priority, timeout and max_retry where the spec left them out (priority: left at 0).
        `new_batch` is `submit_batch`: the batch is recorded even without a cap.
        """
        caps: dict[str, int | None] = {}
        out = []
        for spec in specs:
            limits = self.limits.batch(spec.batch_id or batch_id)
            if limits is not None:
                spec = _batch_defaults(spec, limits)
                if limits.cap is not None:
                    caps[limits.id] = limits.cap
            out.append(spec)
        if batch_id is not None and not new_batch and cap is None and len(out) == 1:
            # one task: its batch after it, so a known idempotency key (which answers with
            # the existing task) leaves no empty batch behind; one task cannot pass a cap
            [task] = scheduler.submit_many(out, now, batch_id=batch_id)
            if task.created_at == now and batch_id in caps:
                scheduler.submit_batch([], now, batch_id, caps[batch_id])
            return [task]
        if batch_id is not None and (new_batch or cap is not None):
            caps[batch_id] = cap if cap is not None else caps.get(batch_id)
        for bid, bcap in caps.items():
            scheduler.submit_batch([], now, bid, bcap)  # a batch keeps its first cap
        return scheduler.submit_many(out, now, batch_id=batch_id)

    # -- building a driver's parts ---------------------------------------------------------

    def fleet_limits(self, store: Store) -> dict[str, FleetLimits]:
        """The fleet-scoped fuses on `store`; RuntimeConfigError if it cannot hold them."""
        return {name: build_fleet(name, client, store)
                for name, client in self.downstreams.items() if client.scope == "fleet"}

    def scheduler(
        self,
        store: Store,
        *,
        sinks: Iterable[EventSink] = (),
        now: float = 0.0,
        rng: random.Random | None = None,
    ) -> Scheduler:
        """A Scheduler over `store` with this app's policies and fresh guards (the builder's).

        Task ids and trace ids come from the OS's randomness (unless the app has a seed),
        because many processes submit into one durable store and must never mint the same id.
        """
        sched = build_scheduler(self.limits, store, now=now,
                                rng=rng if rng is not None else self._rng("scheduler"),
                                sinks=sinks, ids=new_task_id, extra_fatal=RUNTIME_FATAL,
                                downstreams=self.downstreams)
        sched.policy = self.policy
        for kind, policy in self._policies.items():
            k = self.limits.kinds.get(kind)
            if k is None or k.retry is None:
                sched.policies[kind] = policy
        return sched

    def call_clients(self) -> dict[str, CallClient]:
        """Fresh per-call clients (timeout, retry policy, budget, jitter stream), one per
        downstream, for one driver: `ctx.downstream(name).call` uses them."""
        return {name: CallClient(name, client, self._rng(f"retry:{name}"))
                for name, client in self.downstreams.items()}

    def pool_sections(self) -> dict[str, PoolSection]:
        """Fresh pool sections, one per pool of the limits, for one driver (`ctx.pool`)."""
        return {name: PoolSection(name, p.size, p.acquire_timeout_s)
                for name, p in self.limits.pools.items()}

    def _rng(self, concern: str) -> random.Random:
        """One stream per concern: seeded from the app's seed, else from the OS."""
        if self.seed is None:
            return random.Random(secrets.randbits(64))
        return random.Random(f"{self.seed}:{concern}")


def _check_coroutine(kind: str, fn: Callable[..., Any], executor: str) -> None:
    """An `async def` runs on the event loop only, and the event loop runs only those."""
    coroutine = inspect.iscoroutinefunction(fn)
    if coroutine and executor != "async":
        raise RuntimeConfigError(f"kind {kind!r}: {fn.__qualname__} is an async def, which "
                                 f"runs on executor 'async' only, not {executor!r}")
    if executor == "async" and not coroutine:
        raise RuntimeConfigError(f"kind {kind!r}: executor 'async' runs an async def, and "
                                 f"{fn.__qualname__} is a plain function")


def _check_numbers(kind: str, timeout: float | None, max_retry: int | None,
                   priority: int) -> None:
    """The same bounds as a limits file's (taskfuse.core.bounds), at registration."""
    try:
        if timeout is not None:
            bounds.duration(f"{kind}: timeout", timeout)
        if max_retry is not None:
            bounds.count(f"{kind}: max_retry", max_retry, 0, bounds.MAX_RETRY)
        bounds.count(f"{kind}: priority", priority, bounds.MIN_INT64, bounds.MAX_INT64)
    except bounds.BoundError as exc:
        raise RuntimeConfigError(str(exc)) from None


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


def describe_limits(limits: Limits) -> str:
    """The limits in one line: workers, task policy, lease, every downstream, pool, batch."""
    retry = limits.retry
    parts = [f"workers {limits.workers}", f"task timeout {limits.task_timeout_s:g}s",
             f"retries {retry.max_retry}" + _budget(retry.budget)]
    sweeper = limits.sweeper
    if sweeper.lease_s is not None:
        parts.append(f"lease {sweeper.lease_s:g}s (heartbeat {heartbeat_interval(limits):g}s)")
    for name, ds in sorted(limits.downstreams.items()):
        parts.append(f"{name}: {_describe_client(ds.client)}")
    for name, pool in sorted(limits.pools.items()):
        parts.append(f"pool {name} {pool.size} (wait {pool.acquire_timeout_s:g}s)")
    parts += [f"batch {b.id} cap {b.cap}" for b in limits.batches if b.cap is not None]
    return "; ".join(parts)


def _describe_client(c: ClientLimits) -> str:
    fuses = []
    if c.bulkhead is not None:
        fuses.append(f"bulkhead {c.bulkhead}" + (f" adaptive {c.adaptive.kind} "
                                                 f"{c.adaptive.min}..{c.adaptive.max}"
                                                 if c.adaptive is not None else ""))
    if c.rate_limit is not None:
        fuses.append(f"rate {c.rate_limit.rate:g}/s burst {c.rate_limit.burst:g}")
    if c.breaker is not None:
        fuses.append(f"breaker {c.breaker.failure_rate:g} open {c.breaker.open_wait_s:g}s")
    if c.timeout_s is not None:
        fuses.append(f"timeout {c.timeout_s:g}s")
    if c.retry.max_retry:
        fuses.append(f"call retries {c.retry.max_retry}" + _budget(c.retry.budget))
    if c.scope == "fleet":
        fuses.append("fleet-wide")
    elif c.instances > 1:
        fuses.append(f"share 1/{c.instances}")
    return ", ".join(fuses) or "no fuse"


def _budget(budget: Any) -> str:
    if budget is None:
        return ""
    if budget.kind == "ratio":
        return f" (budget {budget.ratio:g} of firsts)"
    return f" (token budget {budget.capacity:g})"


# -- helpers -------------------------------------------------------------------------------


def _client(name: str, *, breaker: Any, rate: float | None, burst: float | None,
            scope: str, instances: int, **given: Any) -> ClientLimits:
    """A ClientLimits from App.downstream's keywords (only those given count as set)."""
    doc: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if rate is not None:
        doc["rate_limit"] = {"rate": rate, **({"burst": burst} if burst is not None else {})}
    elif burst is not None:
        raise RuntimeConfigError(f"downstream {name!r}: burst needs a rate")
    if isinstance(breaker, BreakerConfig):
        breaker = {**dataclasses.asdict(breaker), "window": str(breaker.window.value)}
    if breaker is not None:
        doc["breaker"] = breaker
    if scope != "process":
        doc["scope"] = scope
    if instances != 1:
        doc["instances"] = instances
    for key, value in list(doc.items()):
        if isinstance(value, BaseModel):
            doc[key] = value.model_dump(exclude_unset=True)
    try:
        return ClientLimits.model_validate(doc)
    except ValidationError as exc:
        raise RuntimeConfigError(_one_line(exc, f"downstream {name!r}")) from None


def _validated(doc: dict[str, Any], what: str) -> Limits:
    try:
        return Limits.model_validate(doc)
    except ValidationError as exc:
        raise RuntimeConfigError(_one_line(exc, what)) from None


def _one_line(exc: ValidationError, what: str) -> str:
    return format_validation_error(exc, what, {}, "not a limits key; see `lab schema --limits`")


def _lay(base: dict[str, Any], over: Mapping[str, Any],
         path: tuple[str, ...] = ()) -> dict[str, Any]:
    """`over` laid on `base` (documents of set keys): see `App.configure`."""
    out = dict(base)
    for key, value in over.items():
        sub = (*path, key)
        mine = out.get(key)
        if sub == ("batches",):
            out[key] = _lay_batches(mine or [], value or [])
        elif isinstance(mine, dict) and isinstance(value, dict) and _merged(sub):
            out[key] = _lay(mine, value, sub)
        else:
            out[key] = value
    return out


def _merged(path: tuple[str, ...]) -> bool:
    if path in _MERGED:
        return True
    if len(path) == 2 and path[0] in ("kinds", "pools", "downstreams"):
        return True
    return len(path) == 3 and path[0] == "downstreams" and path[2] == "client"


def _lay_batches(base: list[dict[str, Any]], over: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(b) for b in base]
    index = {b.get("id"): i for i, b in enumerate(out)}
    for batch in over:
        if batch.get("id") in index:
            out[index[batch["id"]]].update(batch)
        else:
            out.append(dict(batch))
    return out


def _first(*values: Any) -> Any:
    """The first value that is not None (None if all are)."""
    return next((v for v in values if v is not None), None)


def _batch_priority(batch: BatchLimits | None) -> int | None:
    if batch is None or "priority" not in batch.model_fields_set:
        return None
    return batch.priority


def _batch_defaults(spec: TaskSpec, batch: BatchLimits) -> TaskSpec:
    changes: dict[str, Any] = {}
    if spec.timeout is None and batch.timeout_s is not None:
        changes["timeout"] = batch.timeout_s
    if spec.max_retry is None and batch.max_retry is not None:
        changes["max_retry"] = batch.max_retry
    priority = _batch_priority(batch)
    if spec.priority == 0 and priority is not None:
        changes["priority"] = priority
    return replace(spec, **changes) if changes else spec


def _with_runtime_fatal(policy: RetryPolicy) -> RetryPolicy:
    """The policy with the runtime's own unfixable kinds (unknown kind, bad config) fatal."""
    return replace(policy, fatal=policy.fatal | RUNTIME_FATAL)
