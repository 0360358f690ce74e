"""Regression figures that stay put on a shared, noisy machine, and the committed baseline.

Seconds swing 15-30 % here, so CI holds what is stable instead:

* deterministic counts that must not grow: simpy events per task of the lab (and of the
  minimal model beside it), Python function calls per claim+complete cycle of the core,
  SQL statements per task of the SQLite store;
* behaviour: the exit code of `lab simulate` on every shipped scenario (the incident must
  break its SLO, the fix must keep it) and a few headline numbers of each;
* one ratio measured in the same run, lab wall time / minimal model wall time on the same
  workload, with a wide margin;
* the fit round trip: `lab fit` on the recorded load test of every shipped scenario
  (benchmarks/runs/), the fitted scenario simulated and compared with that run (makespan,
  task p99, calls and 429s, metrics within 25 %): deterministic, as the runs are recorded.

    python -m benchmarks.regression            # measure and compare with the baseline
    python -m benchmarks.regression --update   # measure and rewrite benchmarks/baseline.json

The baseline is indented, key-sorted JSON so its diff reads well in review.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "benchmarks" / "baseline.json"
COUNT_SLACK = 1.02  # a deterministic count may grow by 2 % before it is a regression
RATIO_SLACK = 1.5  # the wall-time ratio may grow by half before it is a regression
METRIC_SLACK = 0.10  # headline numbers of a scenario may move by 10 %


def lab_events_per_task(n: int = 3000) -> dict[str, float]:
    from benchmarks.minimal_incident import MinimalIncident
    from lab.scenario import load_scenario
    from lab.sim import Simulation

    sc = load_scenario(ROOT / "scenarios/incident.yaml",
                       ["business.breaker=null", f"batches.skus.count={n}"])
    lab = Simulation(sc).run().simpy_events / n
    minimal = MinimalIncident(sc).run().events / n
    return {"lab": round(lab, 3), "minimal": round(minimal, 3)}


def lab_wall_ratio(n: int = 3000, rounds: int = 5) -> float:
    """Median of lab / minimal wall times, the two run alternately in this process."""
    from benchmarks.minimal_incident import MinimalIncident
    from lab.scenario import load_scenario
    from lab.sim import Simulation

    sc = load_scenario(ROOT / "scenarios/incident.yaml",
                       ["business.breaker=null", f"batches.skus.count={n}"])
    ratios = []
    for _ in range(rounds):
        t = time.process_time()
        MinimalIncident(sc).run()
        minimal = time.process_time() - t
        t = time.process_time()
        Simulation(sc).run()
        ratios.append((time.process_time() - t) / minimal)
    return round(statistics.median(ratios), 3)


def core_calls_per_cycle(n: int = 2000) -> float:
    """Python function calls per claim + complete, counted by the profiler."""
    from taskfuse.core.scheduler import Scheduler, Work
    from taskfuse.core.task import Outcome, TaskSpec
    from taskfuse.store.memory import MemoryStore

    events: list[Any] = []
    sched = Scheduler(MemoryStore(), rng=random.Random(1), sinks=[events.append])
    sched.submit_many([TaskSpec("k")] * n, 0.0)
    ok = Outcome.success(None)

    def drain() -> None:
        now = 0.0
        while isinstance(answer := sched.claim("w", now), Work):
            for task in answer.tasks:
                now += 0.001
                sched.complete(task, ok, now)

    profile = cProfile.Profile()
    profile.runcall(drain)
    calls = sum(v[1] for v in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
    return round(calls / n, 2)


def sqlite_statements_per_task(n: int = 300) -> float:
    """SQL statements the SQLite store runs per submit + claim + complete."""
    from taskfuse.core.scheduler import Scheduler, Work
    from taskfuse.core.task import Outcome, TaskSpec
    from taskfuse.store.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "r.db")
        statements = 0

        def count(_: str) -> None:
            nonlocal statements
            statements += 1

        _trace_all(store, count)
        sched = Scheduler(store, rng=random.Random(1))
        sched.submit_many([TaskSpec("k")] * n, 0.0)
        ok = Outcome.success(None)
        now = 0.0
        while isinstance(answer := sched.claim("w", now), Work):
            for task in answer.tasks:
                now += 0.001
                sched.complete(task, ok, now)
        store.close()
    return round(statements / n, 2)


def _trace_all(store: Any, callback: Any) -> None:
    """Attach a statement counter to the store's connection of this thread (the store opens
    one connection per thread; the benchmark runs in one)."""
    conn = store._conn()
    if not isinstance(conn, sqlite3.Connection):
        raise RuntimeError("the SQLite store no longer exposes its per-thread connection")
    conn.set_trace_callback(callback)


def scenarios() -> dict[str, dict[str, Any]]:
    """Exit code and headline numbers of `lab simulate` on every shipped scenario."""
    import contextlib
    import io

    from lab.cli import main

    out: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = main(["simulate", str(path), "--json", "--no-trace"])
        report = json.loads(buf.getvalue())
        biz = report["business"] or {}
        out[path.name] = {
            "exit": code,
            "makespan_s": report["makespan_s"],
            "business_p99_s": biz.get("p99_s"),
            "success": report["tasks"]["SUCCESS"],
        }
    return out


#: Recorded load tests of the shipped scenarios (`lab loadtest FILE --trace ...`), kept so
#: the fit -> simulate -> compare round trip is measured on the same real runs every time.
RUNS = ROOT / "benchmarks" / "runs"
FIT_SLACK = 0.05  # a round trip's relative difference may grow by 5 points


def fit_round_trips() -> dict[str, dict[str, Any]]:
    """`lab fit` on each recorded load test, the fitted scenario simulated and compared
    with the recorded report: the relative differences a person sizing limits reads."""
    from lab.fit import fit_trace, fitted_scenario
    from lab.loadtest.compare import compare_reports
    from lab.run import run_scenario
    from lab.scenario import parse_scenario

    out: dict[str, dict[str, Any]] = {}
    for trace in sorted(RUNS.glob("*.trace")):
        fit = fit_trace(trace)
        real = fit.run.report or {}
        sim = run_scenario(parse_scenario(fitted_scenario(fit), str(trace))).report
        rows = compare_reports(sim, real, 0.25, fit.run.time_scale)

        def rel(path: str, rows: list[Any] = rows) -> float | None:
            row = next((r for r in rows if r.metric == path), None)
            return None if row is None or row.rel is None else round(row.rel, 4)

        calls = [r for r in rows if r.metric.endswith((".calls", ".rejected_429"))]
        out[trace.stem] = {
            "makespan_rel": rel("makespan_s"),
            "run_p99_rel": rel("run_s.p99"),
            "calls_rel": _pooled(calls, ".calls"),
            "r429_rel": _pooled(calls, ".rejected_429"),
            "agree": sum(not r.flagged for r in rows),
            "metrics": len(rows),
        }
    return out


def _pooled(rows: list[Any], suffix: str) -> float | None:
    """(real - simulated) / simulated of a count summed over downstreams."""
    sim = sum(r.simulated or 0 for r in rows if r.metric.endswith(suffix))
    real = sum(r.real or 0 for r in rows if r.metric.endswith(suffix))
    return round((real - sim) / sim, 4) if sim else (None if real == 0 else float("inf"))


def _fit_changes(now: dict[str, Any], base: dict[str, Any]) -> list[str]:
    problems = []
    for name, was in base.items():
        got = now.get(name)
        if got is None:
            problems.append(f"fit round trip {name}: the recorded run is gone")
            continue
        for key in ("makespan_rel", "run_p99_rel", "calls_rel", "r429_rel"):
            a, b = got[key], was[key]
            if a is not None and b is not None and abs(a) > abs(b) + FIT_SLACK:
                problems.append(f"fit round trip {name}: {key} {a:+.1%} (baseline {b:+.1%})")
        if got["agree"] < was["agree"] - 1:
            problems.append(f"fit round trip {name}: {got['agree']} of {got['metrics']} "
                            f"metrics agree (baseline {was['agree']})")
    return problems


def measure(with_wall: bool = True) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "lab_events_per_task": lab_events_per_task(),
        "core_calls_per_cycle": core_calls_per_cycle(),
        "sqlite_statements_per_task": sqlite_statements_per_task(),
        "scenarios": scenarios(),
        "fit_round_trip": fit_round_trips(),
    }
    if with_wall:
        figures["lab_over_minimal_wall"] = lab_wall_ratio()
    return figures


def compare(now: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """Regressions of `now` against `base`, one readable line each."""
    problems: list[str] = []

    def count(name: str, a: float, b: float) -> None:
        if a > b * COUNT_SLACK:
            problems.append(f"{name}: {a} > baseline {b} (+{(a / b - 1) * 100:.1f} %)")

    count("lab simpy events per task", now["lab_events_per_task"]["lab"],
          base["lab_events_per_task"]["lab"])
    count("core calls per claim+complete", now["core_calls_per_cycle"],
          base["core_calls_per_cycle"])
    count("sqlite statements per task", now["sqlite_statements_per_task"],
          base["sqlite_statements_per_task"])
    if "lab_over_minimal_wall" in now and "lab_over_minimal_wall" in base:
        limit = base["lab_over_minimal_wall"] * RATIO_SLACK
        if now["lab_over_minimal_wall"] > limit:
            problems.append(f"lab/minimal wall ratio {now['lab_over_minimal_wall']} > "
                            f"{limit:.2f} (baseline {base['lab_over_minimal_wall']} x "
                            f"{RATIO_SLACK})")
    problems += _scenario_changes(now["scenarios"], base["scenarios"])
    problems += _fit_changes(now.get("fit_round_trip", {}), base.get("fit_round_trip", {}))
    return problems


def _scenario_changes(now: dict[str, Any], base: dict[str, Any]) -> list[str]:
    problems = []
    for name, was in base.items():
        got = now.get(name)
        if got is None:
            problems.append(f"scenario {name} is gone")
            continue
        if got["exit"] != was["exit"]:
            problems.append(f"scenario {name}: lab simulate exits {got['exit']}, baseline "
                            f"{was['exit']}")
        for key in ("makespan_s", "business_p99_s", "success"):
            a, b = got[key], was[key]
            if a is None or b is None:
                if a != b:
                    problems.append(f"scenario {name}: {key} {a} vs baseline {b}")
            elif abs(a - b) > METRIC_SLACK * max(abs(b), 1e-9):
                problems.append(f"scenario {name}: {key} {a} vs baseline {b} (more than "
                                f"{METRIC_SLACK:.0%} apart)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    args = parser.parse_args(argv)
    now = measure()
    if args.update:
        BASELINE.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n")
        print(f"wrote {BASELINE.relative_to(ROOT)}")
        return 0
    problems = compare(now, json.loads(BASELINE.read_text()))
    print(json.dumps(now, indent=2, sort_keys=True))
    for line in problems:
        print(f"REGRESSION: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
