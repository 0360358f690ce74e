"""Scenario files: YAML in, a validated, immutable `Scenario` out — or one clear line.

Models are strict (`extra="forbid"`): an unknown key is an error, never silently dropped.
Errors name the file, the line, the key path and what was expected. `--set a.b=v` edits
the raw document before validation, so overrides get the very same checks.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    model_validator,
)

from lab.model.cron import check_cron_arrival
from lab.model.dist import Constant, DistSpec, as_dist
from taskfuse.configfile import (
    ConfigError,
    Lines,
    apply_overrides,
    located,
    parse_document,
    quote,
    read_text,
    validate,
)
from taskfuse.limits.files import join_limits, limits_of, read_limits_document, strip_limits
from taskfuse.limits.schema import (
    MAX_NUMBER,
    BatchLimits,
    BreakerSpec,
    Count,
    DownstreamLimits,
    Duration,
    Limits,
    NonNeg,
    Offset,
    Period,
    PoolLimits,
    PosFloat,
    PosInt,
    Ratio,
    Seed,
    Strict,
)

# Every number of the world is one of the limits format's bounded types (taskfuse.core.bounds
# says why): finite, within stated bounds, strict (`true` and "5" are not numbers). Times of
# the world (windows, latencies, a fault's moment) are Offsets: 0 to 30 days.
Dist = Annotated[DistSpec, BeforeValidator(as_dist)]
#: How many times slower (a slowdown's factor, a burst over its rate): 1 to MAX_NUMBER.
Factor = Annotated[float, Field(strict=True, ge=1, le=MAX_NUMBER)]

# Bounds on numbers that would otherwise decide how much memory or time a run takes before
# it can say anything (scenarios/README.md, "Bounds"). Far above any shipped scenario. The
# number of workers is bounded by the limits format (taskfuse.limits.schema.MAX_WORKERS).
#: Tasks a run may create, summed over batches (count x (1 + the most children a task can
#: have)): every task stays in memory to the end, about 1 KB each.
MAX_TASKS = 400_000
#: The bound in force (MAX_TASKS unless a command lifted it: `task_bound`; None: none).
TASK_BOUND: ContextVar[int | None] = ContextVar("TASK_BOUND", default=MAX_TASKS)


@contextmanager
def task_bound(limit: int | None) -> Iterator[None]:
    """Scenarios loaded inside may create up to `limit` tasks (None: no bound)."""
    token = TASK_BOUND.set(limit)
    try:
        yield
    finally:
        TASK_BOUND.reset(token)


#: The largest count a per-task draw may give (calls of a step, children of a task).
MAX_PER_TASK = 1_000
#: Times a periodic process (sampler, watchdog, sweeper) may run over the horizon.
MAX_TICKS = 1_000_000
#: Business requests over the horizon at the highest rate given.
MAX_BUSINESS_REQUESTS = 2_000_000


#: A scenario that cannot be used; the message is the one line a user sees. The same
#: exception as a limits file's, so one handler serves both kinds of file.
ScenarioError = ConfigError


# -- the world -----------------------------------------------------------------------------


class Window(Strict):
    start_s: Offset
    end_s: Offset

    @model_validator(mode="after")
    def _order(self) -> Window:
        if self.end_s <= self.start_s:
            raise ValueError(
                f"end_s must be > start_s (got start_s={self.start_s!r}, end_s={self.end_s!r})"
            )
        return self


class Outage(Window):
    """The provider is down: it answers `error` after `latency_s`, or hangs (mode: hang)
    until the client's timeout (or the window's end)."""

    mode: Literal["error", "hang"] = "error"
    error: str = "http_503"
    latency_s: Offset = 0.005


class Slowdown(Window):
    """Service times are multiplied by factor inside the window (2 = half speed)."""

    factor: Factor = 2.0


class Capacity(Strict):
    """c servers with a FIFO queue in front: latency = queueing + service, so it grows
    with load. Without it, latency is drawn independently of load."""

    servers: PosInt
    service: Dist


class Provider(Strict):
    """The other side of a downstream: its own limit, latency, errors and outages."""

    rate: PosFloat | None = None
    burst: Factor | None = None
    reject_latency_s: Offset = 0.01
    latency: Dist = Constant(value=0.1)
    capacity: Capacity | None = None
    errors: dict[str, Ratio] = Field(default_factory=dict)
    outages: list[Outage] = Field(default_factory=list)
    slowdowns: list[Slowdown] = Field(default_factory=list)

    @model_validator(mode="after")
    def _errors_sum(self) -> Provider:
        total = sum(self.errors.values())
        if total > 1:
            raise ValueError(f"error rates must sum to <= 1, got {total:g}")
        return self


class Downstream(DownstreamLimits):
    """A downstream: the provider (world) and our client's fuses (limits, `client`)."""

    provider: Provider
    safety_factor: Annotated[Ratio, Field(gt=0)] = 0.7


class Pool(PoolLimits):
    """A DB connection pool: FIFO waiting, and a wait longer than acquire_timeout_s fails.
    Its size and timeout are limits; its outages are the world's."""

    outages: list[Window] = Field(default_factory=list)


class RateStep(Strict):
    at_s: Offset
    rate: NonNeg


class Business(Strict):
    """User-facing requests sharing (or not) a pool: Poisson arrivals, a query each, a
    gateway that gives up after gateway_timeout_s and has its own breaker."""

    pool: str
    rate: NonNeg
    schedule: list[RateStep] = Field(default_factory=list)
    query: Dist
    gateway_timeout_s: Duration = 5.0
    breaker: BreakerSpec | None = None


# -- the work ------------------------------------------------------------------------------


class WorkStep(Strict):
    work: Dist


class CpuStep(Strict):
    """CPU the task's own code spends (parsing, hashing). On a thread or process kind it is
    the same as `work`: the worker is busy. On an `async` kind it holds the worker's event
    loop: coroutines that want the loop meanwhile wait for it (the loop's lag)."""

    cpu: Dist


class DbSpec(Strict):
    pool: str
    query: Dist
    hold: Literal["query_only", "whole_task"] = "query_only"


class DbStep(Strict):
    db: DbSpec


def _bounded_count(count: DistSpec) -> DistSpec:
    """A count drawn per task must have a largest value, and a small one: an unbounded
    draw could ask for any number of calls or children at once."""
    if count.upper > MAX_PER_TASK:
        raise ValueError(f"a count drawn per task must be at most {MAX_PER_TASK:,}: use "
                         "constant, uniform, integers or empirical with values up to that")
    return count


PerTask = Annotated[Dist, AfterValidator(_bounded_count)]


class CallSpec(Strict):
    downstream: str
    count: PerTask = Constant(value=1)


class CallStep(Strict):
    call: CallSpec


class HangSpec(Strict):
    """With `probability`, the task blocks here for a `duration` drawn from its distribution,
    ignoring cancellation (a socket read without a timeout, a deadlocked library call).
    Under the `thread` executor its worker stays busy ("stuck") until the hang ends, long
    after the watchdog timed the attempt out; under `process` the worker process is killed
    at the timeout and respawned; under `async` it is an await that never returns in time,
    and the coroutine is cancelled at the timeout (its slot free at once)."""

    probability: Ratio
    duration: Dist


class HangStep(Strict):
    hang: HangSpec


STEP_KINDS = ("work", "cpu", "db", "call", "hang")


def _step_tag(value: Any) -> str | None:
    """Which kind of step a mapping is, by its one key (work, cpu, db, call or hang)."""
    if isinstance(value, dict):
        keys = [k for k in STEP_KINDS if k in value]
        return keys[0] if len(keys) == 1 else None
    return next((k for k in STEP_KINDS if hasattr(value, k)), None)


Step = Annotated[
    Annotated[WorkStep, Tag("work")]
    | Annotated[CpuStep, Tag("cpu")]
    | Annotated[DbStep, Tag("db")]
    | Annotated[CallStep, Tag("call")]
    | Annotated[HangStep, Tag("hang")],
    Discriminator(_step_tag, custom_error_type="step_kind",
                  custom_error_message="a step is one of {work: ...}, {cpu: ...}, {db: ...}, "
                                       "{call: ...} or {hang: ...}"),
]


class Arrival(Strict):
    """closed: all at t=start_s; poisson: at `rate` per second (until `count` tasks);
    schedule: Poisson with the rate changing at given times."""

    kind: Literal["closed", "poisson", "schedule", "cron"] = "closed"
    start_s: Offset = 0.0
    rate: PosFloat | None = None
    steps: list[RateStep] = Field(default_factory=list)
    #: cron: `per_tick` tasks at each tick of `cron` in `tz`, virtual time 0 being `origin`
    cron: str | None = None
    tz: str | None = None
    origin: str | None = None
    per_tick: PosInt = 1
    #: Scenario seconds per second of the cron's clock (`lab loadtest --time-scale` sets it)
    tick_scale: PosFloat = 1.0

    @model_validator(mode="after")
    def _needs(self) -> Arrival:
        if self.kind == "poisson" and self.rate is None:
            raise ValueError("a poisson arrival needs rate")
        if self.kind == "schedule" and not self.steps:
            raise ValueError("a schedule arrival needs steps")
        if self.kind == "cron":
            check_cron_arrival(self.cron, self.tz, self.origin)
        return self


class Child(Strict):
    """DAG fan-out: for each task of the batch, `count` tasks that depend on it."""

    kind: str
    count: PerTask
    program: list[Step] = Field(min_length=1)


class BatchSpec(BatchLimits):
    """A batch of the world (how many tasks, when they arrive, what each does) with its
    limits (cap, priority, timeout_s, max_retry: see BatchLimits)."""

    count: Count
    kind: str = "task"
    arrival: Arrival = Arrival()
    duplicates: Ratio = 0.0
    program: list[Step] = Field(min_length=1)
    children: list[Child] = Field(default_factory=list)

    @property
    def most_tasks(self) -> int:
        """The most tasks this batch can create: count x (1 + the most children of each)."""
        return self.count * (1 + sum(int(c.count.upper + 0.5) for c in self.children))

    def tasks_by(self, horizon_s: float) -> int:
        """The most tasks this batch can create before the run ends at `horizon_s`: what
        arrives by then (a Poisson count bounded far above its mean: mean + 6 sd + 10, at
        the highest rate given), x (1 + the most children of each), at most `most_tasks`."""
        arrival = self.arrival
        window = horizon_s - arrival.start_s
        if window < 0:
            return 0
        if arrival.kind == "closed":
            return self.most_tasks
        peak = max([arrival.rate or 0.0, *(step.rate for step in arrival.steps)])
        mean = peak * window
        arrived = min(self.count, math.ceil(mean + 6 * math.sqrt(mean) + 10))
        return min(self.most_tasks, arrived * (self.most_tasks // max(1, self.count)))


class Fault(Strict):
    """worker_crash: `workers` workers die at at_s; their RUNNING tasks are left behind."""

    kind: Literal["worker_crash"]
    at_s: Offset
    workers: PosInt = 1


class SLO(Strict):
    """Promises the run must keep; a broken one makes `lab simulate` exit 1."""

    business_p99_s: Duration | None = None
    business_timeouts: Count | None = None
    makespan_s: Duration | None = None
    success_rate: Ratio | None = None
    max_429: Count | None = None


def _file_name_part(name: str) -> str:
    """A scenario's name becomes part of a file name (traces/NAME-seedN.trace)."""
    if not 0 < len(name) <= 100 or any(c in name for c in "/\\") or not name.isprintable():
        raise ValueError(f"expected 1 to 100 printable characters without / or \\ (the "
                         f"name is part of trace file names), got {quote(name)}")
    return name


class Scenario(Limits):
    """A world (providers, pools' outages, business traffic, batches' arrivals and programs,
    faults, SLOs) and the limits under test (every field of `Limits`), inline or from a
    limits file (`limits: FILE`, or `--limits FILE` on the command line)."""

    name: Annotated[str, AfterValidator(_file_name_part)] = "scenario"
    description: str = ""
    seed: Seed = 0
    horizon_s: Duration = 3600.0
    sample_interval_s: Period = 1.0
    pools: dict[str, Pool] = Field(default_factory=dict)  # type: ignore[assignment]
    downstreams: dict[str, Downstream] = Field(default_factory=dict)  # type: ignore[assignment]
    business: Business | None = None
    batches: list[BatchSpec] = Field(min_length=1)  # type: ignore[assignment]
    faults: list[Fault] = Field(default_factory=list)
    #: How long a worker of a `process` kind is gone after its process is killed (timeout or
    #: cancel): the kill and a new process ready to claim. Measured on a 2-core machine:
    #: 0.14-0.30 s with fork or forkserver (median about 0.2 s), so 0.2 by default.
    process_respawn_s: Offset = 0.2
    slo: SLO = SLO()
    _limits_source: str | None = PrivateAttr(default=None)
    _limits_only: frozenset[tuple[str, str]] = PrivateAttr(default=frozenset())

    @property
    def limits_source(self) -> str | None:
        """The limits file the limits came from, or None when they are inline."""
        return self._limits_source

    def limits(self) -> Limits:
        """The deployable half of this scenario, as a limits file would hold it."""
        return Limits.model_validate(limits_of(self.model_dump()))

    @model_validator(mode="after")
    def _few_enough_tasks(self) -> Scenario:
        """Bound what a run creates, not what it declares: a batch of 1,000,000 arriving at
        a rate the horizon ends after 47k is a run of 47k tasks (`tasks_by`)."""
        bound = TASK_BOUND.get()
        total = sum(b.tasks_by(self.horizon_s) for b in self.batches)
        if bound is not None and total > bound:
            raise ValueError(f"batches: the batches may create {total:,} tasks by the horizon "
                             f"({self.horizon_s:g} s; count x (1 + children per task), "
                             f"arrivals at their highest rate); a run holds at most "
                             f"{bound:,} (about 1 KB of memory each; lab simulate "
                             "--max-tasks lifts it)")
        return self

    def problems(self, unused: bool = True) -> list[tuple[tuple[Any, ...], str]]:
        """Cross-references a model cannot check field by field: (key path, what is wrong).

        `unused=False` leaves out entries nothing refers to (a sweep checks those over all
        its points: a pool added with --set may be used by only some of them).
        """
        found = self._too_big()
        for i, batch in enumerate(self.batches):
            programs = [(("batches", i, "program"), batch.program)]
            programs += [(("batches", i, "children", c, "program"), child.program)
                         for c, child in enumerate(batch.children)]
            for where, program in programs:
                for k, step in enumerate(program):
                    found += self._step_problems(step, (*where, k))
        if self.business is not None and self.business.pool not in self.pools:
            found.append((("business", "pool"), f"{self.business.pool!r} is not one of the "
                          f"pools {sorted(self.pools)}"))
        return found + (self.unused() if unused else [])

    def _too_big(self) -> list[tuple[tuple[Any, ...], str]]:
        """Numbers that decide a run's size before it can say anything (see MAX_*): the
        periodic processes' ticks and the business requests over the horizon."""
        horizon = self.horizon_s
        found: list[tuple[tuple[Any, ...], str]] = []
        for where, interval in ((("sample_interval_s",), self.sample_interval_s),
                                (("watchdog_interval_s",), self.watchdog_interval_s),
                                (("sweeper", "interval_s"), self.sweeper.interval_s)):
            if horizon / interval > MAX_TICKS:
                found.append((where, f"{interval:g} s would run more than {MAX_TICKS:,} times "
                                     f"over the horizon of {horizon:g} s: use a longer interval"))
        if self.business is not None:
            peak = max([self.business.rate, *(s.rate for s in self.business.schedule)])
            if peak * horizon > MAX_BUSINESS_REQUESTS:
                found.append((("business",), f"{peak:g} requests/s over the horizon of "
                               f"{horizon:g} s is more than {MAX_BUSINESS_REQUESTS:,} requests: "
                               "shorten horizon_s or lower the rate"))
        return found

    def unused(self) -> list[tuple[tuple[Any, ...], str]]:
        """Pools and downstreams nothing refers to: most often a typo (`--set
        pools.shard.size=5` meant `shared`), which would otherwise change nothing silently."""
        pools: set[str] = {self.business.pool} if self.business is not None else set()
        downstreams: set[str] = set()
        for batch in self.batches:
            for step in [*batch.program, *(s for c in batch.children for s in c.program)]:
                if isinstance(step, DbStep):
                    pools.add(step.db.pool)
                elif isinstance(step, CallStep):
                    downstreams.add(step.call.downstream)
        found = []
        for section, names, used in (("pools", self.pools, pools),
                                     ("downstreams", self.downstreams, downstreams)):
            for name in names:
                if name not in used and (section, name) not in self._limits_only:
                    close = difflib.get_close_matches(name, sorted(used), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    found.append(((section, name), "not used by any batch, child or business "
                                  f"traffic{hint}: remove it or refer to it"))
        return found

    def _step_problems(self, step: Step, at: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
        if isinstance(step, DbStep) and step.db.pool not in self.pools:
            return [((*at, "db", "pool"), f"{step.db.pool!r} is not one of the pools "
                     f"{sorted(self.pools)}")]
        if isinstance(step, CallStep) and step.call.downstream not in self.downstreams:
            return [((*at, "call", "downstream"), f"{step.call.downstream!r} is not one of "
                     f"the downstreams {sorted(self.downstreams)}")]
        return []


# -- loading -------------------------------------------------------------------------------

_HINT = "not part of the scenario format; see `lab schema`"


def read_scenario_text(path: str | Path) -> str:
    """A scenario file's text; a missing or unreadable file is a ScenarioError (one line)."""
    return read_text(path, "scenario")


def load_scenario(path: str | Path, overrides: list[str] | None = None,
                  limits: str | Path | None = None, *, allow_unused: bool = False) -> Scenario:
    """Read, override and validate a scenario; any problem is a ScenarioError (one line).

    `limits` (the `--limits FILE` of the lab's commands) replaces the scenario's own limits,
    inline or referenced, with a limits file's: the scenario's world against a deployable
    file.
    """
    return parse_scenario(read_scenario_text(path), str(path), overrides, limits,
                          allow_unused=allow_unused)


def parse_scenario(text: str, source: str = "<scenario>",
                   overrides: list[str] | None = None,
                   limits: str | Path | None = None, *, allow_unused: bool = False
                   ) -> Scenario:
    """A scenario from its text; `allow_unused` for a sweep's points (see `problems`)."""
    doc, lines = parse_document(text, source, "scenario")
    limits_source, limits_only = _pull_limits(doc, lines, source, limits)
    apply_overrides(doc, overrides)
    scenario = validate(Scenario, doc, source, lines, _HINT)
    scenario._limits_only = frozenset(limits_only)
    problems = scenario.problems(unused=not allow_unused)
    if problems:
        loc, what = problems[0]
        raise ScenarioError(located(source, lines, loc, what))
    scenario._limits_source = limits_source
    return scenario


def self_contained(text: str, source: str, limits: str | Path | None = None) -> str:
    """The scenario's text with its limits file joined in, so it needs no other file.

    Sweeps and searches ship scenario text to worker processes (or machines) and fingerprint
    it to resume; a limits file they could not see, or that changed between two runs, would
    break both. Unchanged when the scenario has no limits file.
    """
    doc, lines = parse_document(text, source, "scenario")
    if limits is None and "limits" not in doc:
        return text
    joined, _ = _pull_limits(doc, lines, source, limits)
    dumped = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    return f"# {source} joined with its limits file {joined}\n{dumped}"


def _pull_limits(doc: dict[str, Any], lines: Lines, source: str, override: str | Path | None
                 ) -> tuple[str | None, set[tuple[str, str]]]:
    """Join the limits file the scenario names (or `override`) into its document; answers
    the file and the pools and downstreams only it has (see `join_limits`)."""
    named = doc.pop("limits", None)
    if override is not None:
        strip_limits(doc)
        path = Path(override)
    elif named is None:
        return None, set()
    elif not isinstance(named, str) or not named.strip():
        raise ScenarioError(located(source, lines, ("limits",),
                                    f"expected the path of a limits file, got {named!r}"))
    else:  # relative to the scenario file, as an include would be
        path = Path(named)
        if not path.is_absolute() and not source.startswith("<"):
            path = Path(source).parent / path
    limits_doc, _ = read_limits_document(path)
    return str(path), join_limits(doc, lines, source, limits_doc, str(path))


def json_schema(limits: bool = False) -> str:
    """The scenario format (or, with `limits`, the limits file's) as JSON Schema, for editor
    completion (`lab schema [--limits]`)."""
    model = Limits if limits else Scenario
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "taskfuse limits file" if limits else "taskfuse lab scenario"
    return json.dumps(schema, indent=2, sort_keys=True)
