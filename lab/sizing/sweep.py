"""`lab sweep`: run a scenario over a grid of overrides and seeds, and summarise the metrics.

The grid is the product of `--vary key.path=LIST_OR_RANGE` axes (LIST `10,20,50`, RANGE
`5..50:5`, both ends included). Every (point, seed) is one `lab simulate` run of the scenario
with `--set key.path=value` for each axis; seeds are seed, seed+1, ... so a point's spread
over seeds is the run-to-run noise a person must not mistake for an effect.

Why the pieces look as they do:

- A `Job` carries the scenario *text*, not its path, so any executor (local processes, a
  Dask cluster on other machines) can run it, and results depend on nothing but the job.
- Results are filed under (point, seed) in a `RunStore`, never by arrival order, so the
  table and the files are the same whichever executor ran them.
- The store is the resume point: with `--out PREFIX` it is written to PREFIX.json (every run's
  full report) and PREFIX.csv (one row per run, the chosen metrics) every few seconds, at the
  end and on Ctrl-C; a rerun with the same --out skips the (point, seed) pairs already there.
  A fingerprint of the scenario text, the --set overrides and the varied keys guards
  against resuming a different sweep into the same files.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import itertools
import json
import math
import os
import re
import sys
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from lab.scenario import (
    Scenario,
    ScenarioError,
    parse_scenario,
    read_scenario_text,
    self_contained,
)
from lab.sizing.executors import Executor
from lab.sizing.metrics_expr import metric_value
from taskfuse.configfile import located, parse_document
from taskfuse.limits.schema import MAX_NUMBER
from taskfuse.textable import columns

Point = tuple[Any, ...]
Report = dict[str, Any]
Runner = Callable[["Job"], Report]
MAX_POINTS = 1_000_000
#: The smallest step of a range: values are rounded to 12 decimals, so a smaller step would
#: give the same value twice.
MIN_STEP = 1e-9


# -- axes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """One varied key and the values it takes, in the order given."""

    key: str
    values: tuple[Any, ...]
    text: str


def _split_items(spec: str) -> list[str]:
    """Split a LIST on top-level commas, so `{rate: 90, burst: 10},{rate: 50}` is two items."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    items.append(spec[start:])
    return [item.strip() for item in items]


def _number(raw: str, text: str) -> int | float:
    """An end or step of a range: finite and at most MAX_NUMBER either way (the bound of
    every number of a scenario), so the count of values is arithmetic, not an overflow."""
    try:
        value: int | float = int(raw) if len(raw) <= 40 else float("nan")
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            raise ScenarioError(f"--vary {text!r}: {raw[:40]!r} is not a number") from None
    if not math.isfinite(value) or abs(value) > MAX_NUMBER:
        raise ScenarioError(f"--vary {text!r}: expected a range's numbers from "
                            f"-{MAX_NUMBER:g} to {MAX_NUMBER:g}, got {raw[:40]!r}")
    return value


def parse_range(spec: str, text: str) -> list[int | float]:
    """'5..50:5' -> [5, 10, ..., 50]: both ends included; step 1 when omitted."""
    lo_raw, _, rest = spec.partition("..")
    hi_raw, _, step_raw = rest.partition(":")
    lo, hi = _number(lo_raw.strip(), text), _number(hi_raw.strip(), text)
    step = _number(step_raw.strip(), text) if step_raw.strip() else 1
    if abs(step) < MIN_STEP:
        raise ScenarioError(f"--vary {text!r}: the step of {spec!r} is below {MIN_STEP:g} "
                            "(values are rounded to 12 digits)")
    count = math.floor((hi - lo) / step + 1e-9) + 1
    if count <= 0:
        raise ScenarioError(f"--vary {text!r}: the range {spec!r} has no values (from {lo} "
                            f"to {hi} in steps of {step})")
    if count > MAX_POINTS:
        raise ScenarioError(f"--vary {text!r}: the range {spec!r} has {count:,} values")
    if all(isinstance(x, int) for x in (lo, hi, step)):
        return [int(lo + i * step) for i in range(count)]
    return [round(lo + i * step, 12) for i in range(count)]


def parse_values(spec: str, text: str) -> list[Any]:
    """A LIST (YAML scalars or flow values, comma-separated) or a RANGE."""
    if ".." in spec and "," not in spec and not spec.strip().startswith(("{", "[")):
        return parse_range(spec, text)
    values: list[Any] = []
    for item in _split_items(spec):
        if not item:
            raise ScenarioError(f"--vary {text!r}: empty value in {spec!r}")
        try:
            value = yaml.safe_load(item)
        except yaml.YAMLError:
            raise ScenarioError(f"--vary {text!r}: {item!r} is not a valid value") from None
        if value not in values:
            values.append(value)
    return values


_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


def parse_vary(text: str) -> Axis:
    """'workers=5..50:5' -> Axis('workers', (5, 10, ..., 50))."""
    key, eq, spec = text.partition("=")
    key = key.strip()
    if not eq or not spec.strip():
        raise ScenarioError(f"--vary {text!r}: expected key.path=LIST or key.path=FROM..TO:STEP")
    if not _KEY.match(key):
        raise ScenarioError(f"--vary {text!r}: {key!r} is not a key path like pools.shared.size")
    return Axis(key, tuple(parse_values(spec, text)), text)


def override(key: str, value: Any) -> str:
    """A `--set` text for one value: bare when YAML reads it back as the same string,
    JSON otherwise (JSON is valid YAML, so every value round-trips)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w\-]*", value):
        try:
            if yaml.safe_load(value) == value:
                return f"{key}={value}"
        except yaml.YAMLError:
            pass
    return f"{key}={json.dumps(value)}"


def _is_model_mapping(annotation: Any) -> bool:
    """dict[str, SomeModel]: its keys name things (pools, downstreams), so must exist."""
    args = typing.get_args(annotation)
    return (typing.get_origin(annotation) is dict and len(args) == 2
            and isinstance(args[1], type) and issubclass(args[1], BaseModel))


def _list_item(items: list[Any], part: str) -> Any:
    if part.isdigit() and int(part) < len(items):
        return items[int(part)]
    return next((it for it in items if getattr(it, "id", None) == part), None)


def current_value(scenario: Scenario, axis: Axis) -> Any:
    """The scenario's value at the axis's path (None when unset); a path that names nothing
    in the scenario format (or a pool or downstream that is not there) is one clear line."""
    node: Any = scenario
    annotation: Any = None
    parts = axis.key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[: i + 1])
        if node is None:
            return None
        if isinstance(node, BaseModel):
            fields = type(node).model_fields
            if part not in fields:
                raise ScenarioError(f"--vary {axis.text!r}: {where}: no such key (expected "
                                    f"one of: {', '.join(fields)})")
            node, annotation = getattr(node, part), fields[part].annotation
        elif isinstance(node, dict):
            if part not in node and _is_model_mapping(annotation):
                raise ScenarioError(f"--vary {axis.text!r}: {where}: no such entry (there is: "
                                    f"{', '.join(node) or 'none'}; add one with --set)")
            node, annotation = node.get(part), None
        elif isinstance(node, list):
            item = _list_item(node, part)
            if item is None:
                raise ScenarioError(f"--vary {axis.text!r}: {where}: no list item {part!r} "
                                    f"(use an index 0..{len(node) - 1} or an item's id)")
            node, annotation = item, None
        else:
            raise ScenarioError(f"--vary {axis.text!r}: {where}: {'.'.join(parts[:i])} is a "
                                f"value ({node!r}), not a section")
    return node.model_dump(exclude_none=True) if isinstance(node, BaseModel) else node


# -- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """One simulation: everything a worker anywhere needs, and nothing else."""

    text: str
    source: str
    overrides: tuple[str, ...]
    seed: int


@functools.lru_cache(maxsize=32)
def _parsed(text: str, source: str, overrides: tuple[str, ...]) -> Scenario:
    # an entry unused at this point may be used at another (checked once, in the Plan)
    return parse_scenario(text, source, list(overrides), allow_unused=True)


def run_job(job: Job) -> Report:
    """The default runner: simulate, no trace, return the report (what `--json` prints)."""
    from lab.simulate.run import (
        run_scenario,  # late: the parent of a process pool never needs simpy
    )

    return run_scenario(_parsed(job.text, job.source, job.overrides), job.seed).report


@dataclass(frozen=True)
class Plan:
    """A scenario, its fixed overrides, the varied axes and the seeds of every point."""

    text: str
    source: str
    overrides: tuple[str, ...]
    axes: tuple[Axis, ...]
    seeds: tuple[int, ...]
    scenario: Scenario
    baseline: Point

    @classmethod
    def from_file(cls, path: str | Path, overrides: Sequence[str], vary: Sequence[str],
                  seeds: int = 1, seed: int | None = None,
                  limits: str | Path | None = None) -> Plan:
        """Read and check everything up front, so bad input fails before any run.

        A limits file (named by the scenario, or `limits`) is joined into the plan's text,
        so every run sees the same limits and the fingerprint covers them.
        """
        text = read_scenario_text(path)
        parse_scenario(text, str(path), list(overrides), limits,  # errors point into the files
                       allow_unused=True)
        return cls.from_text(self_contained(text, str(path), limits), str(path), overrides,
                             vary, seeds, seed)

    @classmethod
    def from_text(cls, text: str, source: str, overrides: Sequence[str], vary: Sequence[str],
                  seeds: int = 1, seed: int | None = None) -> Plan:
        if seeds < 1:
            raise ScenarioError(f"--seeds {seeds!r}: expected at least 1")
        if not vary:
            raise ScenarioError("nothing to vary: give at least one --vary key.path=VALUES")
        scenario = parse_scenario(text, source, list(overrides), allow_unused=True)
        axes = tuple(parse_vary(v) for v in vary)
        variants = _check_axes(text, source, list(overrides), scenario, axes)
        _check_unused(text, source, [scenario, *variants])
        first = scenario.seed if seed is None else seed
        baseline = tuple(current_value(scenario, a) for a in axes)
        return cls(text, source, tuple(overrides), axes, tuple(range(first, first + seeds)),
                   scenario, baseline)

    @property
    def keys(self) -> list[str]:
        return [a.key for a in self.axes]

    def points(self) -> list[Point]:
        """Every grid point, in grid order (the first axis varies slowest)."""
        return list(itertools.product(*(a.values for a in self.axes)))

    def size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    def job(self, point: Point, seed: int) -> Job:
        sets = tuple(override(k, v) for k, v in zip(self.keys, point, strict=True))
        return Job(self.text, self.source, (*self.overrides, *sets), seed)

    def baseline_job(self, seed: int) -> Job:
        """The scenario as configured (file + --set), none of the axes applied."""
        return Job(self.text, self.source, self.overrides, seed)

    def fingerprint(self) -> str:
        """What must match for stored runs to belong to this sweep (seeds and ranges may
        grow between runs; the scenario, the fixed overrides and the varied keys may not)."""
        blob = "\0".join([self.text, *self.overrides, "\0", *sorted(self.keys)])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def apply_hint(self, point: Point) -> str:
        """The `lab simulate` command line that runs this point (an axis replaces a --set of
        the same key)."""
        fixed = [o for o in self.overrides if o.partition("=")[0].strip() not in self.keys]
        sets = [*fixed, *(override(k, v) for k, v in zip(self.keys, point, strict=True))]
        return " ".join(["lab simulate", self.source, *(f"--set '{s}'" for s in sets)])


def _check_axes(text: str, source: str, overrides: list[str], scenario: Scenario,
                axes: Sequence[Axis]) -> list[Scenario]:
    """Each path must exist and each value must validate (with the other axes as configured).

    Returns the scenario of every value so checked."""
    seen: set[str] = set()
    variants = []
    for axis in axes:
        if axis.key in seen:
            raise ScenarioError(f"--vary {axis.text!r}: {axis.key} is varied twice")
        seen.add(axis.key)
        current_value(scenario, axis)
        for value in axis.values:
            try:
                variants.append(parse_scenario(text, source,
                                               [*overrides, override(axis.key, value)],
                                               allow_unused=True))
            except ScenarioError as exc:
                raise ScenarioError(f"--vary {axis.text!r}: value {value!r}: {exc}") from None
    return variants


def _check_unused(text: str, source: str, scenarios: Sequence[Scenario]) -> None:
    """A pool or downstream that no value of any axis puts to use is an error, as it is for
    one run (a pool added with --set and chosen by an axis is used by some points only)."""
    unused = [(loc, what) for loc, what in scenarios[0].unused()
              if all(loc in {where for where, _ in s.unused()} for s in scenarios[1:])]
    if unused:
        _, lines = parse_document(text, source, "scenario")
        raise ScenarioError(located(source, lines, *unused[0]))


# -- statistics ----------------------------------------------------------------------------

#: Two-sided 95 % Student t quantiles by degrees of freedom (1.96 beyond 30).
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


@dataclass(frozen=True, slots=True)
class Stat:
    """A metric over seeds: mean, 95 % confidence half-width (Student t), min, max, n."""

    mean: float
    half: float
    lo: float
    hi: float
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {"mean": clean(self.mean), "ci95": clean(self.half), "min": clean(self.lo),
                "max": clean(self.hi), "n": self.n}


def stat(values: Iterable[float]) -> Stat:
    """Summarise over seeds; NaN (no measurement) is left out, an all-NaN metric is NaN."""
    xs = [x for x in values if not math.isnan(x)]
    n = len(xs)
    if n == 0:
        return Stat(math.nan, math.nan, math.nan, math.nan, 0)
    mean = sum(xs) / n
    if n == 1:
        return Stat(mean, math.nan, mean, mean, 1)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
    return Stat(mean, t * sd / math.sqrt(n), min(xs), max(xs), n)


def summarize(reports: Sequence[Report], metrics: Sequence[str]) -> dict[str, Stat]:
    return {m: stat(metric_value(r, m) for r in reports) for m in metrics}


# -- storing and resuming ------------------------------------------------------------------


def _sort_key(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((0, v, "") if isinstance(v, int | float) and not isinstance(v, bool)
                 else (1, 0, json.dumps(v, sort_keys=True)) for v in values)


def _atomic_write(path: Path, text: str) -> None:
    """Write beside, then rename: an interrupt mid-write never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunStore:
    """Finished runs by (point, seed); with a prefix, also the PREFIX.json/.csv files."""

    SAVE_EVERY_S = 2.0

    def __init__(self, plan: Plan, metrics: Sequence[str], prefix: str | Path | None = None):
        self.plan = plan
        self.metrics = list(metrics)
        self.prefix = Path(prefix) if prefix is not None else None
        self.runs: dict[tuple[str, int], Report] = {}
        self.points: dict[str, Point] = {}
        self.resumed = 0
        self._saved_at = time.monotonic()
        self._dirty = False
        if self.prefix is not None:
            self._load()

    @staticmethod
    def key(point: Point) -> str:
        return json.dumps(list(point), sort_keys=True)

    def get(self, point: Point, seed: int) -> Report | None:
        return self.runs.get((self.key(point), seed))

    def add(self, point: Point, seed: int, report: Report) -> None:
        key = self.key(point)
        self.points[key] = point
        self.runs[key, seed] = report
        self._dirty = True

    @property
    def json_path(self) -> Path:
        assert self.prefix is not None
        return self.prefix.with_name(self.prefix.name + ".json")

    @property
    def csv_path(self) -> Path:
        assert self.prefix is not None
        return self.prefix.with_name(self.prefix.name + ".csv")

    def _load(self) -> None:
        path = self.json_path
        if not path.exists():
            return
        try:
            doc = json.loads(path.read_text())
            fingerprint, runs = doc["fingerprint"], doc["runs"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ScenarioError(f"{path}: cannot resume from it ({exc!r}); remove it or "
                                "choose another --out") from None
        if fingerprint != self.plan.fingerprint():
            raise ScenarioError(f"{path}: holds a different sweep (another scenario text, --set "
                                "or --vary keys); remove it or choose another --out")
        for run in runs:
            point = tuple(run["values"][k] for k in self.plan.keys)
            self.add(point, int(run["seed"]), run["report"])
        self.resumed = len(self.runs)
        self._dirty = False

    def maybe_save(self) -> None:
        if self._dirty and time.monotonic() - self._saved_at >= self.SAVE_EVERY_S:
            self.save()

    def save(self) -> None:
        if self.prefix is None or (not self._dirty and self.json_path.exists()):
            return
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self.runs.items(),
                         key=lambda kv: (_sort_key(self.points[kv[0][0]]), kv[0][1]))
        _atomic_write(self.json_path, self._json(ordered))
        _atomic_write(self.csv_path, self._csv(ordered))
        self._saved_at = time.monotonic()
        self._dirty = False

    def _json(self, ordered: list[tuple[tuple[str, int], Report]]) -> str:
        plan = self.plan
        runs = [{"values": dict(zip(plan.keys, self.points[key], strict=True)), "seed": seed,
                 "metrics": _metric_row(report, self.metrics), "report": report}
                for (key, seed), report in ordered]
        doc = {"format": "taskfuse-sweep", "version": 1, "scenario": plan.scenario.name,
               "source": plan.source, "fingerprint": plan.fingerprint(),
               "overrides": list(plan.overrides), "axes": plan.keys, "metrics": self.metrics,
               "runs": runs}
        return json.dumps(doc, indent=1) + "\n"

    def _csv(self, ordered: list[tuple[tuple[str, int], Report]]) -> str:
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*self.plan.keys, "seed", *self.metrics])
        for (key, seed), report in ordered:
            row = _metric_row(report, self.metrics)
            writer.writerow([*(_cell(v) for v in self.points[key]), seed,
                             *(_cell(row[m]) for m in self.metrics)])
        return out.getvalue()


def _metric_row(report: Report, metrics: Sequence[str]) -> dict[str, float | int | None]:
    """Metric values for the files: None for no measurement, whole numbers as ints."""
    values = {m: metric_value(report, m) for m in metrics}
    return {m: None if math.isnan(v) else int(v) if v.is_integer() else v
            for m, v in values.items()}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return value if isinstance(value, int | float | str) else json.dumps(value)


# -- running -------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr: runs done of the runs asked for, rate and ETA."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done_n, self.enabled = total, 0, enabled and total > 0
        self.started = time.monotonic()

    def step(self) -> None:
        self.done_n += 1
        if not self.enabled:
            return
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done_n / elapsed
        eta = (self.total - self.done_n) / rate if rate else 0.0
        bar = "#" * (25 * self.done_n // self.total)
        sys.stderr.write(f"\r[{bar:<25}] {self.done_n}/{self.total} runs  {rate:.1f}/s  "
                         f"eta {eta:.0f} s ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 70 + "\r")
            sys.stderr.flush()


class Evaluator:
    """Runs what is missing for a set of points and seeds, files it in the store, and keeps
    what finished when interrupted (the store is saved before the interrupt goes on)."""

    def __init__(self, plan: Plan, store: RunStore, executor: Executor,
                 runner: Runner | None = None, progress: bool = False) -> None:
        self.plan, self.store, self.executor = plan, store, executor
        self._runner = runner
        self.progress = progress
        self.ran = 0

    def evaluate(self, points: Sequence[Point], seeds: Sequence[int]) -> list[list[Report]]:
        """Reports of every (point, seed), in the order of `points` (a list, not a dict:
        a value may be a mapping, which cannot key one); runs only pairs not stored yet."""
        todo = [(p, s) for p in points for s in seeds if self.store.get(p, s) is None]
        jobs = [self.plan.job(p, s) for p, s in todo]
        self._run(todo, jobs)
        return [[self._stored(p, s) for s in seeds] for p in points]

    def baseline(self, seeds: Sequence[int]) -> list[Report]:
        """The scenario as configured, filed under the axes' current values."""
        point = self.plan.baseline
        todo = [(point, s) for s in seeds if self.store.get(point, s) is None]
        self._run(todo, [self.plan.baseline_job(s) for _, s in todo])
        return [self._stored(point, s) for s in seeds]

    def _stored(self, point: Point, seed: int) -> Report:
        report = self.store.get(point, seed)
        assert report is not None
        return report

    def _run(self, todo: list[tuple[Point, int]], jobs: list[Job]) -> None:
        bar = Progress(len(jobs), self.progress)
        try:
            runner = self._runner or run_job  # looked up late, so tests can stand in
            for i, report in self.executor.map(runner, jobs):
                point, seed = todo[i]
                self.store.add(point, seed, report)
                self.ran += 1
                bar.step()
                self.store.maybe_save()
        except KeyboardInterrupt:
            bar.close()
            self.store.save()
            raise
        bar.close()
        self.store.save()


# -- the sweep -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    point: Point
    stats: dict[str, Stat]


def run_sweep(plan: Plan, evaluator: Evaluator, metrics: Sequence[str]) -> list[Row]:
    """Every grid point with every seed; one row of statistics per point, in grid order."""
    points = plan.points()
    results = evaluator.evaluate(points, plan.seeds)
    return [Row(p, summarize(r, metrics)) for p, r in zip(points, results, strict=True)]


DEFAULT_METRICS = ["makespan_s", "throughput_per_s"]


def default_metrics(report: Report) -> list[str]:
    """What a capacity planner looks at first, for the parts this scenario has."""
    metrics = list(DEFAULT_METRICS)
    if report.get("business") is not None:
        metrics += ["business.p99_s", "business.timeouts"]
    if report.get("downstreams"):
        metrics.append("downstreams.*.rejected_429")
    return [*metrics, "slo.ok"]


def fmt(x: float, digits: int = 4) -> str:
    """A number for a table: 4 significant digits, '-' for no measurement."""
    if math.isnan(x):
        return "-"
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_stat(s: Stat) -> str:
    """'0.046 ±0.001'; the bare mean when there is one seed or no spread at all."""
    if s.n <= 1 or math.isnan(s.half) or s.half == 0:
        return fmt(s.mean)
    return f"{fmt(s.mean)} ±{fmt(s.half, 2)}"


def render_table(plan: Plan, rows: Sequence[Row], metrics: Sequence[str]) -> str:
    """Axis values, then mean ±95 % CI of each metric over the seeds."""
    head = [*plan.keys, *metrics]
    body = [[show_value(v) for v in row.point] + [fmt_stat(row.stats[m]) for m in metrics]
            for row in rows]
    lines = columns(head, body, "right")
    seeds = plan.seeds
    which = f"seeds ({seeds[0]}..{seeds[-1]})" if len(seeds) > 1 else f"seed ({seeds[0]})"
    note = (f"{len(rows)} points x {len(seeds)} {which}; mean ±95 % confidence interval "
            "over seeds")
    return "\n".join([*lines, "", note]) + "\n"


def show_value(value: Any) -> str:
    """An axis value as a person reads it: strings bare, numbers short, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return fmt(float(value))
    return json.dumps(value)


def report_skeleton(scenario: Scenario) -> Report:
    """A report of the scenario's shape at no cost (no task, a 1 ms horizon): what metric
    paths exist, checked before a sweep spends minutes."""
    from lab.simulate.run import run_scenario

    batches = [b.model_copy(update={"count": 0}) for b in scenario.batches]
    tiny = scenario.model_copy(update={"horizon_s": 1e-3, "batches": batches})
    return run_scenario(tiny, scenario.seed).report
