"""Simulated vs real, metric by metric: how far to trust the simulator on this scenario.

Both reports have the same keys (the load test reuses the simulator's report), so the
comparison walks a fixed list of key paths — the numbers a person sizing limits reads —
and gives each its relative difference (real - simulated) / simulated.

A difference is flagged when it is beyond the tolerance *and* beyond the noise floor: a
count within 5 of the simulated one, or a time within 2 ms of real time (timer and thread
wake-up resolution, converted to scenario seconds), is agreement whatever its percentage —
otherwise 0 vs 2 retries would read as an infinite disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

COUNT_FLOOR = 5
REAL_TIME_FLOOR_S = 0.002

_TOP = ["makespan_s", "throughput_per_s", "tasks.SUCCESS", "tasks.FAILED", "tasks.TIMEOUT",
        "tasks.CANCELED", "attempts", "retries", "wait_s.p50", "wait_s.p99", "run_s.p50",
        "run_s.p99"]
_DOWNSTREAM = ["calls", "ok", "rejected_429", "errors", "timeouts", "call_retries",
               "breaker_rejections", "max_in_flight", "breaker_opens", "peak_rps",
               "latency_p99_s"]
#: Hung tasks: compared when either run had a stuck worker or killed a process.
_STUCK = ["stuck_workers.peak", "stuck_workers.mean", "stuck_workers.replaced",
          "stuck_workers.retired", "workers_killed"]
_POOL = ["max_in_use", "acquires", "wait_mean_s", "wait_p99_s", "timeouts"]
_BUSINESS = ["requests", "p50_s", "p99_s", "timeouts", "errors", "rejected_by_breaker",
             "breaker_opens"]


@dataclass(frozen=True)
class Row:
    metric: str
    simulated: float | None
    real: float | None
    rel: float | None  # (real - simulated) / |simulated|; None when undefined
    flagged: bool


def metric_paths(report: dict[str, Any], other: dict[str, Any] | None = None) -> list[str]:
    """The compared key paths that exist in this scenario's report (the stuck workers'
    when either report shows a hang: elsewhere they are 0 = 0 rows)."""
    paths = list(_TOP)
    if any(lookup(r, p) for r in (report, other or {}) for p in _STUCK):
        paths += _STUCK
    for name in report["downstreams"]:
        paths += [f"downstreams.{name}.{k}" for k in _DOWNSTREAM]
    for name in report["pools"]:
        paths += [f"pools.{name}.{k}" for k in _POOL]
    if report.get("business") is not None:
        paths += [f"business.{k}" for k in _BUSINESS]
    return paths


def lookup(report: dict[str, Any], path: str) -> float | None:
    node: Any = report
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return None if node is None or isinstance(node, bool) else float(node)


def is_time(path: str) -> bool:
    """Whether a key path names seconds: its last part (`latency_p99_s`) or the metric it is
    a percentile of (`run_s.p99`). Everything else is a count (or a count-like figure)."""
    return any(part.endswith("_s") for part in path.split("."))


def compare_reports(simulated: dict[str, Any], real: dict[str, Any], tolerance: float,
                    time_scale: float) -> list[Row]:
    """One Row per compared metric, flagged when beyond tolerance and noise (module doc)."""
    time_floor = REAL_TIME_FLOOR_S / time_scale
    rows = []
    for path in metric_paths(simulated, real):
        a, b = lookup(simulated, path), lookup(real, path)
        rel = None
        if a is not None and b is not None:
            rel = (b - a) / abs(a) if a else (0.0 if b == 0 else float("inf"))
        floor = time_floor if is_time(path) else COUNT_FLOOR
        if path == "throughput_per_s" and a:
            floor = 0.0
        flagged = (a is None) != (b is None) or (
            rel is not None and abs(rel) > tolerance and abs(b - a) > floor  # type: ignore[operator]
        )
        rows.append(Row(path, a, b, rel, flagged))
    return rows


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x == int(x) and abs(x) < 1e9:
        return f"{int(x)}"
    return f"{x:.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(rel: float | None) -> str:
    if rel is None:
        return "-"
    if rel == float("inf"):
        return "new"
    return f"{rel * 100:+.1f}%"


def render_comparison(rows: list[Row], scenario: str, tolerance: float, time_scale: float,
                      wall: tuple[float, float], real_source: str | None = None) -> str:
    """The comparison as a table, flagged rows marked, and a one-line verdict."""
    width = max(len(r.metric) for r in rows) + 2
    where = (f"wall {wall[0]:.1f} s simulated, {wall[1]:.1f} s real" if real_source is None
             else f"real: the recorded run {real_source}")
    lines = [f"scenario {scenario}: simulated vs real (time scale {time_scale:g}, times in "
             f"scenario seconds; {where})", "",
             f"{'metric':<{width}}{'simulated':>12}{'real':>12}{'diff':>10}"]
    for r in rows:
        mark = "  <- beyond tolerance" if r.flagged else ""
        lines.append(f"{r.metric:<{width}}{_num(r.simulated):>12}{_num(r.real):>12}"
                     f"{_pct(r.rel):>10}{mark}")
    flagged = sum(r.flagged for r in rows)
    lines += ["", f"{len(rows) - flagged} of {len(rows)} metrics agree within "
                  f"±{tolerance * 100:g}% (or within noise: {COUNT_FLOOR} counts, "
                  f"{REAL_TIME_FLOOR_S * 1000:g} ms of real time); {flagged} beyond"]
    return "\n".join(lines) + "\n"


def rows_as_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [{"metric": r.metric, "simulated": r.simulated, "real": r.real,
             "rel_diff": None if r.rel is None or r.rel == float("inf") else round(r.rel, 4),
             "flagged": r.flagged} for r in rows]


def compare_with_trace(scenario: Any, trace: Path, tolerance: float, seed: int | None
                       ) -> tuple[list[Row], Any, dict[str, Any], float]:
    """`lab compare --real`: simulate `scenario` and compare it with the report a recorded run
    left in its trace (its footer), at that run's time scale. No real run is started."""
    from lab.scenario import ScenarioError
    from lab.simulate.run import run_scenario
    from taskfuse.trace import TraceError, read_trace

    try:
        recorded = read_trace(trace)
    except TraceError as exc:
        raise ScenarioError(str(exc)) from None
    if recorded.report is None:
        raise ScenarioError(f"{trace}: the run did not finish (no report in the trace); "
                            "compare needs a finished run")
    scale = float((recorded.header.get("meta") or {}).get("time_scale") or 1.0)
    simulated = run_scenario(scenario, seed)
    return (compare_reports(simulated.report, recorded.report, tolerance, scale), simulated,
            recorded.report, scale)
