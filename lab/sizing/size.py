"""`lab size`: the configuration that meets every SLO and does best on one objective.

What "meets" means: a point is *feasible* when every constraint holds on every seed run
(the worst seed, not the average: a limit that breaks the SLO one day in five is a limit
that breaks the SLO), the batch finishes within horizon_s, and the scenario's own `slo` block
holds (so `lab simulate` on the answer exits 0). Among feasible points the best mean
objective wins; exact ties go to the values listed first (with ascending ranges: fewer
workers, smaller pools).

How the space is searched:

- *Grid*, when points x seeds fits the run budget: every point, every seed. Exact.
- Otherwise three stages, each explainable on a whiteboard:
  1. *screen*: a coarse sub-grid (evenly spaced values of each axis, both ends included),
     one seed each, sized to about a third of the budget;
  2. *successive halving over seeds*: the best screened points get 2, 4, ... seeds, and
     each round keeps the better half, so noise cannot crown a lucky point;
  3. *compass search* from the survivor on the full-resolution grid: try every neighbour
     (all 3^d combinations of -step/0/+step for up to 3 axes, axis moves beyond), move to
     the best one that improves, halve the step when none does, stop at step 1. Diagonal
     moves matter: "more workers" alone breaks the SLO and "a bigger pool" alone does not
     help, while both together do.

Either way the recommendation's neighbours (one step along each axis) are run with every
seed, which is what says *which constraint binds*: a neighbour that would do better but
breaks an SLO names that SLO; otherwise the report at the point names the saturated
resource (a pool at its size with waits, a bulkhead at its limit, a provider answering 429,
workers all busy).

The answer can be deployed as it is: `recommended_limits` is the recommended point's
scenario cut down to its limits (`Scenario.limits()`), which `--write-limits FILE` writes
under a comment saying where it came from, for `taskfuse worker --limits FILE`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.scenario import Scenario, parse_scenario
from lab.sizing.metrics_expr import Constraint, canonical
from lab.sizing.sweep import (
    Evaluator,
    Plan,
    Point,
    Report,
    Stat,
    fmt,
    fmt_stat,
    show_value,
    summarize,
)
from taskfuse.limits.schema import Limits
from taskfuse.textable import columns

Index = tuple[int, ...]

FINISHED = Constraint("finished", ">=", 1.0, "the batch finishes within horizon_s")
FILE_SLO = Constraint("slo.ok", ">=", 1.0, "the scenario's own slo block")


@dataclass(frozen=True)
class Objective:
    """The metric to optimise; `score` is higher-is-better either way."""

    path: str
    maximize: bool

    def score(self, s: Stat) -> float:
        return s.mean if self.maximize else -s.mean

    def __str__(self) -> str:
        return f"{'maximize' if self.maximize else 'minimize'} {self.path}"


def objective(maximize: str | None, minimize: str | None) -> Objective:
    if maximize is not None:
        return Objective(canonical(maximize), True)
    assert minimize is not None
    return Objective(canonical(minimize), False)


@dataclass(frozen=True)
class Judged:
    """A point's verdict over the seeds it was run with."""

    point: Point
    index: Index
    reports: tuple[Report, ...]
    feasible: bool
    score: float
    broken: tuple[tuple[Constraint, float], ...]
    margin: float

    def rank(self) -> tuple[Any, ...]:
        """Lower is better: feasible first, then objective (or closeness to feasible)."""
        if self.feasible:
            return (0, -self.score if not math.isnan(self.score) else math.inf, self.index)
        return (1, -self.margin, self.index)


def _worst(c: Constraint, reports: Sequence[Report]) -> float:
    values = [c.value(r) for r in reports]
    return min(values, key=lambda v: (c.margin(v), v))


def judge(point: Point, index: Index, reports: Sequence[Report],
          constraints: Sequence[Constraint], goal: Objective) -> Judged:
    broken = tuple((c, _worst(c, reports)) for c in constraints
                   if not all(c.holds(r) for r in reports))
    user = [c for c in constraints if c not in (FINISHED, FILE_SLO)]
    margin = min((c.margin(_worst(c, reports)) for c in user), default=0.0)
    margin -= sum(1.0 for c, _ in broken if c in (FINISHED, FILE_SLO))
    score = goal.score(summarize(reports, [goal.path])[goal.path])
    return Judged(point, index, tuple(reports), not broken, score, broken, margin)


@dataclass
class SizeResult:
    plan: Plan
    goal: Objective
    constraints: list[Constraint]
    strategy: str
    best: Judged
    baseline: Judged
    neighbours: list[tuple[int, Judged]]
    runs: int
    budget_hit: bool = False


class Search:
    """Finds the best feasible point of a plan's grid through an Evaluator."""

    def __init__(self, plan: Plan, evaluator: Evaluator, constraints: Sequence[Constraint],
                 goal: Objective, budget: int) -> None:
        self.plan, self.ev, self.goal, self.budget = plan, evaluator, goal, budget
        self.constraints = list(constraints)
        self.sizes = [len(a.values) for a in plan.axes]
        self.budget_hit = False

    def point(self, index: Index) -> Point:
        return tuple(a.values[k] for a, k in zip(self.plan.axes, index, strict=True))

    def judge_all(self, indices: Sequence[Index], n_seeds: int) -> list[Judged]:
        """Run (what is missing of) these points with the first n seeds and judge them."""
        seeds = self.plan.seeds[:n_seeds]
        unique = list(dict.fromkeys(indices))
        results = self.ev.evaluate([self.point(i) for i in unique], seeds)
        return [judge(self.point(i), i, r, self.constraints, self.goal)
                for i, r in zip(unique, results, strict=True)]

    def run(self) -> SizeResult:
        grid = self.plan.size() * len(self.plan.seeds) <= self.budget
        best = self._grid() if grid else self._staged()
        neighbours = self._neighbours(best)
        base = self.plan.baseline
        base_judged = judge(base, (), self.ev.baseline(self.plan.seeds), self.constraints,
                            self.goal)
        strategy = "grid" if grid else "screen + successive halving + compass search"
        return SizeResult(self.plan, self.goal, self.constraints, strategy, best, base_judged,
                          neighbours, self.ev.ran, self.budget_hit)

    def _grid(self) -> Judged:
        indices = list(itertools.product(*(range(n) for n in self.sizes)))
        return min(self.judge_all(indices, len(self.plan.seeds)), key=Judged.rank)

    def _staged(self) -> Judged:
        coarse, strides = self._coarse(max(4, self.budget // 3))
        ranked = sorted(self.judge_all(coarse, 1), key=Judged.rank)
        keep = ranked[: max(2, min(8, len(ranked) // 4))]
        n = 1
        while n < len(self.plan.seeds):
            n = min(2 * n, len(self.plan.seeds))
            keep = sorted(self.judge_all([j.index for j in keep], n), key=Judged.rank)
            keep = keep[: max(1, len(keep) // 2)]
        return self._compass(keep[0], strides)

    def _coarse(self, points: int) -> tuple[list[Index], list[int]]:
        """Evenly spaced values per axis (ends included), as many as fit in `points`."""
        k = 2
        while k < max(self.sizes) and math.prod(min(k + 1, n) for n in self.sizes) <= points:
            k += 1
        picks = [sorted({round(i * (n - 1) / (min(k, n) - 1)) for i in range(min(k, n))})
                 if n > 1 else [0] for n in self.sizes]
        strides = [max(1, (n - 1) // max(1, len(p) - 1)) for n, p in zip(self.sizes, picks,
                                                                         strict=True)]
        return list(itertools.product(*picks)), strides

    def _moves(self, index: Index, steps: Sequence[int]) -> list[Index]:
        d = len(index)
        if d <= 3:
            deltas = [dv for dv in itertools.product((-1, 0, 1), repeat=d) if any(dv)]
        else:
            deltas = [tuple(s if j == i else 0 for j in range(d)) for i in range(d)
                      for s in (-1, 1)]
        out = []
        for dv in deltas:
            moved = tuple(min(n - 1, max(0, k + s * st))
                          for k, s, st, n in zip(index, dv, steps, self.sizes, strict=True))
            if moved != index:
                out.append(moved)
        return list(dict.fromkeys(out))

    def _compass(self, start: Judged, strides: list[int]) -> Judged:
        n = len(self.plan.seeds)
        best = self.judge_all([start.index], n)[0]
        steps = list(strides)
        while True:
            if self.ev.ran >= self.budget:
                self.budget_hit = True
                return best
            better = [j for j in self.judge_all(self._moves(best.index, steps), n)
                      if j.rank() < best.rank()]
            if better:
                best = min(better, key=Judged.rank)
            elif all(s == 1 for s in steps):
                return best
            else:
                steps = [max(1, s // 2) for s in steps]

    def _neighbours(self, best: Judged) -> list[tuple[int, Judged]]:
        """One step down and up each axis, with every seed: the evidence for `binds`."""
        wanted: list[tuple[int, Index]] = []
        for axis, k in enumerate(best.index):
            for step in (-1, 1):
                if 0 <= k + step < self.sizes[axis]:
                    moved = list(best.index)
                    moved[axis] = k + step
                    wanted.append((axis, tuple(moved)))
        judged = self.judge_all([i for _, i in wanted], len(self.plan.seeds))
        by_index = {j.index: j for j in judged}
        return [(axis, by_index[i]) for axis, i in wanted]


# -- why: binding constraint and saturated resources ---------------------------------------


def constraint_kind(c: Constraint) -> str:
    """The name a capacity planner uses for what a constraint protects."""
    if c is FINISHED:
        return "horizon"
    if c is FILE_SLO:
        return "scenario SLO"
    if c.path.startswith("business."):
        return "business SLO"
    if c.path.startswith("downstreams.") and "429" in c.path:
        return "downstream QPS"
    return "SLO"


def _mean(reports: Sequence[Report], get: Any) -> float:
    values = [float(v) for v in (get(r) for r in reports) if v is not None]
    return sum(values) / len(values) if values else math.nan


def saturation(plan: Plan, reports: Sequence[Report]) -> list[tuple[str, str]]:
    """Resources at their limit in these runs (means over seeds), most specific first."""
    found: list[tuple[str, str]] = []
    first = reports[0]
    for name in first["downstreams"]:
        found += _downstream_saturation(plan, name, reports)
    for name, pool in first["pools"].items():
        in_use = _mean(reports, lambda r, n=name: r["pools"][n]["max_in_use"])
        wait = _mean(reports, lambda r, n=name: r["pools"][n]["wait_p99_s"])
        if in_use >= pool["size"] and wait > 0:
            found.append(("pool", f"pool {name}: {fmt(in_use)} of {pool['size']} connections "
                                  f"in use, wait p99 {fmt(wait)} s"))
    if "async" in first:  # an event loop: its CPU, then its slots
        busy = _mean(reports, lambda r: r["async"]["loop_busy_share"])
        lag = _mean(reports, lambda r: r["async"]["loop_lag_s"]["p99"])
        if busy >= 0.9:
            found.append(("loop", f"event loop: busy {fmt(100 * busy)} % of the run, lag p99 "
                                  f"{fmt(lag)} s (more worker processes, not coroutines)"))
    queued = _mean(reports, lambda r: r["wait_s"]["p50"])
    if queued > 0 and "async" in first and first["async"]["peak_in_flight"] >= \
            first["async"]["async_concurrency"]:
        found.append(("slots", f"coroutine slots: tasks waited {fmt(queued)} s (p50) for "
                               "one (async_concurrency)"))
    elif queued > 0:
        found.append(("workers", f"workers: tasks waited {fmt(queued)} s (p50) for a free "
                                 "worker"))
    return found


def _downstream_saturation(plan: Plan, name: str,
                           reports: Sequence[Report]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    get = lambda key: _mean(reports, lambda r: r["downstreams"][name][key])  # noqa: E731
    limit = reports[0]["downstreams"][name]["configured_limit"]
    in_flight = get("max_in_flight")
    if limit is not None and in_flight >= limit:
        found.append(("bulkhead", f"bulkhead {name}: {fmt(in_flight)} of {limit} calls in "
                                  "flight"))
    spec = plan.scenario.downstreams.get(name)
    rate = spec.provider.rate if spec is not None else None
    r429, peak = get("rejected_429"), get("peak_rps")
    if r429 > 0 or (rate is not None and peak >= 0.9 * rate):
        against = f" against the provider's {fmt(rate)}/s" if rate is not None else ""
        found.append(("downstream QPS", f"{name}: peak {fmt(peak)} requests/s{against}, "
                                        f"{fmt(r429)} x 429"))
    return found


@dataclass(frozen=True)
class Neighbour:
    key: str
    frm: Any
    to: Any
    judged: Judged
    better: bool


def neighbours(result: SizeResult) -> list[Neighbour]:
    best = result.best
    out = []
    for axis, j in result.neighbours:
        key = result.plan.axes[axis].key
        better = not math.isnan(j.score) and j.score > best.score
        out.append(Neighbour(key, best.point[axis], j.point[axis], j, better))
    return out


def _violation(c: Constraint, value: float, reports: Sequence[Report]) -> str:
    if c is FILE_SLO:
        texts = sorted({v for r in reports for v in r["slo"]["violations"]})
        return f"the scenario's slo block ({'; '.join(texts)})"
    if c is FINISHED:
        return "does not finish within horizon_s"
    return f"{c} (worst seed {fmt(value)})"


def binds(result: SizeResult) -> tuple[str, str]:
    """(kind, why): the constraint that stops the search from going further."""
    goal = result.goal
    blocked = [n for n in neighbours(result) if n.better and not n.judged.feasible]
    if blocked:
        n = max(blocked, key=lambda n: n.judged.score)
        c, value = n.judged.broken[0]
        score = summarize(n.judged.reports, [goal.path])[goal.path]
        return constraint_kind(c), (
            f"{n.key} {show_value(n.frm)} -> {show_value(n.to)} would do better "
            f"({goal.path} {fmt_stat(score)}) but breaks "
            f"{_violation(c, value, n.judged.reports)}")
    busy = saturation(result.plan, result.best.reports)
    if busy:
        return busy[0][0], busy[0][1]
    return "none", "no constraint binds and no resource is saturated: widen the --vary ranges"




# -- presenting ----------------------------------------------------------------------------


def shown_metrics(result: SizeResult, extra: Sequence[str] = ()) -> list[str]:
    """The objective, every constrained metric, makespan and throughput, then extras."""
    user = [c.path for c in result.constraints if c not in (FINISHED, FILE_SLO)]
    return list(dict.fromkeys([result.goal.path, *user, "makespan_s", "throughput_per_s",
                               *extra]))


def rule_of_thumb(plan: Plan, name: str) -> str:
    """'14 = 100/s x 0.2 s x 0.7': the provider's QPS limit x mean latency x safety factor."""
    spec = plan.scenario.downstreams[name]
    provider = spec.provider
    if provider.rate is None:
        return "- (the provider has no QPS limit)"
    latency = provider.capacity.service.mean if provider.capacity else provider.latency.mean
    value = int(provider.rate * latency * spec.safety_factor)
    return (f"{value} = {fmt(provider.rate)}/s x {fmt(latency)} s x "
            f"{fmt(spec.safety_factor)}")


def _downstream_rows(result: SizeResult) -> list[dict[str, Any]]:
    reports = result.best.reports
    rows = []
    for name, d in reports[0]["downstreams"].items():
        peak = _mean(reports, lambda r, n=name: r["downstreams"][n]["max_in_flight"])
        rows.append({"name": name, "max_in_flight": peak, "configured_limit":
                     d["configured_limit"], "rule_of_thumb_limit": d["rule_of_thumb_limit"],
                     "rule_of_thumb": rule_of_thumb(result.plan, name)})
    return rows


def _bulkhead_hint(d: dict[str, Any]) -> str:
    """Point out an unguarded downstream that went past its rule of thumb."""
    thumb = d["rule_of_thumb_limit"]
    if d["configured_limit"] is None and thumb is not None and d["max_in_flight"] > thumb:
        return (f"no bulkhead: try --vary downstreams.{d['name']}.client.bulkhead="
                f"{max(1, thumb // 2)}..{thumb * 2}")
    return ""


def _verdict(j: Judged) -> str:
    """What a point breaks; the file's slo block only in full when nothing else explains."""
    if j.feasible:
        return "keeps every constraint"
    named = [_violation(c, v, j.reports) for c, v in j.broken if c is not FILE_SLO]
    if any(c is FILE_SLO for c, _ in j.broken):
        named.append("the scenario's slo block" if named
                     else _violation(FILE_SLO, 0.0, j.reports))
    return "breaks " + "; ".join(named)


def _table(rows: list[list[str]]) -> list[str]:
    return columns(rows[0], rows[1:])


def _spread(s: Stat) -> str:
    if s.n <= 1:
        return fmt_stat(s)
    return f"{fmt_stat(s)}  [{fmt(s.lo)} .. {fmt(s.hi)}]"


def _headroom(result: SizeResult, metric: str, s: Stat) -> str:
    notes = []
    for c in result.constraints:
        if c.path == metric and c not in (FINISHED, FILE_SLO):
            worst = _worst(c, result.best.reports)
            notes.append(f"{c.op} {fmt(c.limit)}: {100 * c.margin(worst):.0f} % headroom "
                         "(worst seed)")
    return "; ".join(notes)


def render(result: SizeResult, extra: Sequence[str] = ()) -> str:
    """The recommendation as a person reads it: values, metrics, downstreams, why."""
    plan, best, base = result.plan, result.best, result.baseline
    seeds = plan.seeds
    found = "recommended" if best.feasible else "closest (NO point keeps every constraint)"
    lines = [
        f"lab size {plan.scenario.name}: {result.goal} subject to "
        + ", ".join(c.text for c in result.constraints),
        f"search: {result.strategy}; {plan.size()} points x {len(seeds)} seeds "
        f"({seeds[0]}..{seeds[-1]}) in the space, {result.runs} runs"
        + ("  (run budget reached)" if result.budget_hit else ""),
        "",
    ]
    rows = [["", found, "as configured"]]
    rows += [[a.key, show_value(v), show_value(b)]
             for a, v, b in zip(plan.axes, best.point, base.point, strict=True)]
    lines += [*_table(rows), ""]
    metrics = shown_metrics(result, extra)
    ours, theirs = summarize(best.reports, metrics), summarize(base.reports, metrics)
    rows = [["metric", "mean ±95 % [min .. max] over seeds", "as configured", ""]]
    rows += [[m, _spread(ours[m]), fmt_stat(theirs[m]), _headroom(result, m, ours[m])]
             for m in metrics]
    lines += [*_table(rows), ""]
    lines += [f"as configured: {_verdict(base)}", f"{found}: {_verdict(best)}", ""]
    ds = _downstream_rows(result)
    if ds:
        rows = [["downstream", "max in flight", "configured limit", "rule of thumb", ""]]
        rows += [[d["name"], fmt(d["max_in_flight"]),
                  "none" if d["configured_limit"] is None else str(d["configured_limit"]),
                  d["rule_of_thumb"], _bulkhead_hint(d)] for d in ds]
        lines += [*_table(rows), ""]
    lines += _why(result)
    lines += ["", f"apply: {plan.apply_hint(best.point)}"]
    return "\n".join(lines) + "\n"


def _why(result: SizeResult) -> list[str]:
    kind, why = binds(result)
    lines = [f"binds: {kind} — {why}"]
    busy = saturation(result.plan, result.best.reports)
    if busy:
        lines.append("at their limit here: " + "; ".join(text for _, text in busy))
    edges = [a.key for a, k in zip(result.plan.axes, result.best.index, strict=True)
             if len(a.values) > 1 and k == len(a.values) - 1
             and isinstance(a.values[-1], int | float) and not isinstance(a.values[-1], bool)]
    if edges:
        lines.append(f"at the top of its range: {', '.join(edges)} (widen --vary to look "
                     "further)")
    goal = result.goal.path
    if result.neighbours:
        lines.append("one step along each axis:")
    for n in neighbours(result):
        score = summarize(n.judged.reports, [goal])[goal]
        trend = "better" if n.better else "same" if n.judged.score == result.best.score \
            else "worse"
        state = (f"{goal} {fmt_stat(score)} ({trend})" if n.judged.feasible
                 else _verdict(n.judged))
        lines.append(f"  {n.key} {show_value(n.frm)} -> {show_value(n.to)}: {state}")
    return lines


def as_json(result: SizeResult, extra: Sequence[str] = ()) -> dict[str, Any]:
    """The same answer as one JSON object (`lab size --json`)."""
    plan, metrics = result.plan, shown_metrics(result, extra)
    kind, why = binds(result)

    def point(j: Judged) -> dict[str, Any]:
        stats = summarize(j.reports, metrics)
        return {"values": dict(zip(plan.keys, j.point, strict=True)), "feasible": j.feasible,
                "broken": [_violation(c, v, j.reports) for c, v in j.broken],
                "metrics": {m: s.as_dict() for m, s in stats.items()}}

    return {
        "scenario": plan.scenario.name, "objective": str(result.goal),
        "constraints": [c.text for c in result.constraints], "strategy": result.strategy,
        "seeds": list(plan.seeds), "runs": result.runs, "budget_reached": result.budget_hit,
        "recommended": point(result.best), "baseline": point(result.baseline),
        "binds": {"kind": kind, "why": why},
        "saturated": [{"kind": k, "why": t} for k, t in saturation(plan, result.best.reports)],
        "downstreams": _downstream_rows(result),
        "neighbours": [{"key": n.key, "from": n.frm, "to": n.to, "feasible": n.judged.feasible,
                        "better": n.better} for n in neighbours(result)],
        "apply": plan.apply_hint(result.best.point),
    }


# -- deploying the answer ------------------------------------------------------------------


def recommended_scenario(result: SizeResult) -> Scenario:
    """The scenario at the recommended point: the file, its --set overrides, the values."""
    job = result.plan.job(result.best.point, result.plan.seeds[0])
    return parse_scenario(job.text, job.source, list(job.overrides))


def recommended_limits(result: SizeResult) -> Limits:
    """The deployable half of the recommended point (what `--write-limits` writes)."""
    return recommended_scenario(result).limits()


def limits_header(result: SizeResult, command: str) -> str:
    """The comment heading a written limits file: where it came from and why these values.

    Deterministic (no date, no host): the same command writes the same bytes.
    """
    plan, best = result.plan, result.best
    seeds = plan.seeds
    values = ", ".join(f"{a.key}={show_value(v)}" for a, v in zip(plan.axes, best.point,
                                                                  strict=True))
    score = summarize(best.reports, [result.goal.path])[result.goal.path]
    kind, why = binds(result)
    lines = [
        f"Limits recommended by lab size for scenario {plan.scenario.name!r} "
        f"({plan.source}).",
        f"Recommended: {values}; {result.goal} = {fmt_stat(score)} (mean over seeds).",
        "Kept on every seed: " + "; ".join(c.text for c in result.constraints) + ".",
        f"Seeds: {', '.join(str(s) for s in seeds)}; search: {result.strategy}, "
        f"{result.runs} runs.",
        f"Binds: {kind} - {why}",
        f"Produced by: {command}",
        "Deploy: taskfuse worker --app MODULE:APP --store URL --limits THIS_FILE",
    ]
    if plan.overrides:
        lines.insert(2, "With: " + " ".join(f"--set '{o}'" for o in plan.overrides))
    return "\n".join(lines)
