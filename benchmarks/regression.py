"""Regression figures that stay put on a shared, noisy machine, and the committed baseline.

Everything seeded is byte-identical from run to run, so it is held EXACTLY: a slack on a
deterministic number only hides a change. Held exactly:

* simpy events of the lab and of the minimal model on the same 3,000-SKU incident;
* Python function calls per claim + complete cycle of the core;
* SQL statements per task of the SQLite store;
* every shipped scenario (scenarios/*.yaml): the exit code of `lab simulate`, its headline
  numbers, and a hash of its whole `--json` report less `wall_s`. A shipped scenario missing
  from the baseline fails too: a new scenario is baselined on purpose;
* the fit round trip: `lab fit` on the recorded load test of every shipped scenario
  (benchmarks/runs/), the fitted scenario simulated and compared with that run (makespan,
  task p99, calls and 429s, metrics within 25 %): deterministic, as the runs are recorded.

Costs get a slack, and only as ratios measured side by side in this same run (see
`RATIO_SLACK` and `TIME_RATIO_SLACK` for how they were sized):

* function calls of the lab / of the minimal model on the same workload (deterministic: the
  tight one, 10 %);
* lab CPU time / minimal model CPU time on the same workload (a busy machine moves it: 25 %);
* per store (SQLite, PostgreSQL): CPU seconds of the Runner draining no-op tasks / CPU
  seconds of a minimal hand-written grouped loop draining as many rows of the same database
  (`STORE_RATIO_SLACK` says why CPU and not wall time).

    python -m benchmarks.regression            # measure and compare with the baseline
    python -m benchmarks.regression --update   # measure and rewrite benchmarks/baseline.json

Each figure is one function registered with `@figure(name, compare)`; `measure()` returns one
dict {name: value}. Adding a figure is adding a function (and rebaselining). The baseline is
indented, key-sorted JSON so its diff reads well in review.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import io
import json
import pstats
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "benchmarks" / "baseline.json"

#: How far a ratio of measured costs may rise above its baseline: the lab growing 10 % costlier
#: than the minimal model fails. Held by the deterministic one (`lab_over_minimal_calls`, the
#: same on every machine and under any load).
RATIO_SLACK = 1.10
#: The same for the CPU-time ratio, which a busy machine moves both ways. Its spread, quiet:
#: 0.97-1.035 x its own median over 12 runs on the 2-core machine (1.33-1.42), 0.96-1.04 x over
#: 11 runs on a day it ran twice as fast (1.40-1.50; the minimal model gains more from a faster
#: machine than the lab does, so the baseline is that day's median, 1.45). Beside a second
#: full test suite it read 1.614 (1.113 x, failing a 1.10 slack), beside two CPU-bound
#: processes 1.28 and 1.41, quiet again 1.455 and 1.458. 1.25 passes all of those with room;
#: it catches what the call count cannot: each call growing costlier.
TIME_RATIO_SLACK = 1.25

Compare = Callable[[str, Any, Any], list[str]]


# -- how a figure is compared ----------------------------------------------------------------


def exact(name: str, now: Any, base: Any) -> list[str]:
    """Deterministic figures: any difference is a change (say which keys moved)."""
    if now == base:
        return []
    if isinstance(now, dict) and isinstance(base, dict):
        return [f"{name}.{key}: {now.get(key)!r} vs baseline {base.get(key)!r}"
                for key in sorted(set(now) | set(base)) if now.get(key) != base.get(key)]
    return [f"{name}: {now!r} vs baseline {base!r}"]


def ratio_within(slack: float) -> Compare:
    """Measured ratios (lower is better): may rise up to `slack` x the baseline."""
    def compare(name: str, now: float, base: float) -> list[str]:
        if now > base * slack:
            return [f"{name}: {now} > {base * slack:.3f} (baseline {base} x {slack})"]
        return []
    return compare


def scenarios_exact(name: str, now: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """Every shipped scenario is in the baseline, and each is unchanged."""
    problems = [f"{name}: {s} is shipped but not in the baseline (run `make baseline` and "
                f"review its numbers)" for s in sorted(set(now) - set(base))]
    problems += [f"{name}: {s} is in the baseline but no longer shipped"
                 for s in sorted(set(base) - set(now))]
    for s in sorted(set(now) & set(base)):
        problems += exact(f"{name}.{s}", now[s], base[s])
    return problems


@dataclass(frozen=True)
class Figure:
    measure: Callable[[], Any]
    compare: Compare
    timed: bool  # a wall-time figure: skipped by measure(timed=False)


FIGURES: dict[str, Figure] = {}


def figure(name: str, compare: Compare = exact, timed: bool = False
           ) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        FIGURES[name] = Figure(fn, compare, timed)
        return fn
    return register


# -- the figures -------------------------------------------------------------------------------


def _incident(n: int) -> Any:
    from lab.scenario import load_scenario

    return load_scenario(ROOT / "scenarios/incident.yaml",
                         ["business.breaker=null", f"batches.skus.count={n}"])


@figure("simpy_events")
def simpy_events(n: int = 3000) -> dict[str, int]:
    """simpy events of the lab and of the minimal model on the same n-SKU incident."""
    from benchmarks.minimal_incident import MinimalIncident
    from lab.simulate.sim import Simulation

    sc = _incident(n)
    return {"tasks": n, "lab": Simulation(sc).run().simpy_events,
            "minimal": MinimalIncident(sc).run().events}


@figure("core_calls_per_cycle")
def core_calls_per_cycle(n: int = 2000) -> float:
    """Python function calls per claim + complete, counted by the profiler in a fresh
    interpreter: after a simulation in the same process the count came out one call per
    cycle higher, so the figure depended on which figures ran before it."""
    return _in_fresh_interpreter("_core_calls", n)


def _in_fresh_interpreter(function: str, n: int) -> float:
    """This module's `function(n)`, run in a new Python: what it answered."""
    out = subprocess.run(
        [sys.executable, "-c", f"from benchmarks.regression import {function}; "
                               f"print({function}({n}))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout)


def _profiled_calls(run: Callable[[], Any]) -> int:
    """Function calls the profiler counts while `run` runs, the garbage collector kept out:
    a collection finalizing suspended generators (an earlier simulation's workers) would
    count as calls of whatever ran then."""
    gc.collect()
    gc.disable()
    try:
        profile = cProfile.Profile()
        profile.runcall(run)
    finally:
        gc.enable()
    return sum(v[1] for v in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]


def _core_calls(n: int) -> float:
    from taskfuse.core.scheduler import Scheduler, Work
    from taskfuse.core.task import Outcome, TaskSpec
    from taskfuse.store.memory import MemoryStore

    ok = Outcome.success(None)

    events: list[Any] = []
    sched = Scheduler(MemoryStore(), rng=random.Random(1), sinks=[events.append])
    sched.submit_many([TaskSpec("k")] * n, 0.0)

    def drain() -> None:
        now = 0.0
        while isinstance(answer := sched.claim("w", now), Work):
            for task in answer.tasks:
                now += 0.001
                sched.complete(task, ok, now)

    # Garbage of an earlier figure finalized mid-drain added a call per cycle.
    return round(_profiled_calls(drain) / n, 2)


@figure("sqlite_statements_per_task")
def sqlite_statements_per_task(n: int = 300) -> float:
    """SQL statements the SQLite store sends per submit + claim + complete.

    The statements its triggers run inside SQLite (the kept counts: one per insert, two per
    status change) are not counted: the trace callback repeats the text of the statement
    that fired them for each, so a text repeated at once is one statement."""
    from taskfuse.core.scheduler import Scheduler, Work
    from taskfuse.core.task import Outcome, TaskSpec
    from taskfuse.store.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "r.db")
        statements = 0
        last = ""

        def count(text: str) -> None:
            nonlocal statements, last
            if text != last:
                statements += 1
            last = text

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


@figure("scenarios", compare=scenarios_exact)
def scenarios() -> dict[str, dict[str, Any]]:
    """Exit code, headline numbers and report hash of `lab simulate` on every shipped
    scenario (the headline numbers say what moved; the hash that nothing else did)."""
    from lab.cli import main

    out: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = main(["simulate", str(path), "--json", "--no-trace"])
        report = json.loads(buf.getvalue())
        report.pop("wall_s", None)
        canonical = json.dumps(report, sort_keys=True, separators=(",", ":"))
        biz = report["business"] or {}
        out[path.name] = {
            "exit": code,
            "makespan_s": report["makespan_s"],
            "business_p99_s": biz.get("p99_s"),
            "success": report["tasks"]["SUCCESS"],
            "simpy_events": report["events"],
            "report_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        }
    return out


@figure("lab_over_minimal_wall", compare=ratio_within(TIME_RATIO_SLACK), timed=True)
def lab_wall_ratio(n: int = 3000, rounds: int = 9) -> float:
    """Median of lab / minimal CPU times, the two run alternately in this process."""
    from benchmarks.minimal_incident import MinimalIncident
    from lab.simulate.sim import Simulation

    sc = _incident(n)
    ratios = []
    for _ in range(rounds):
        t = time.process_time()
        MinimalIncident(sc).run()
        minimal = time.process_time() - t
        t = time.process_time()
        Simulation(sc).run()
        ratios.append((time.process_time() - t) / minimal)
    return round(statistics.median(ratios), 3)


@figure("lab_over_minimal_calls", compare=ratio_within(RATIO_SLACK))
def lab_calls_ratio(n: int = 3000) -> float:
    """Function calls (Python and C, as the profiler counts them) of the lab over those of
    the minimal model on the same seeded incident, in a fresh interpreter: deterministic, so
    a busy machine cannot fail it and a lab doing more work per task cannot pass it."""
    return _in_fresh_interpreter("_lab_calls", n)


def _lab_calls(n: int) -> float:
    from benchmarks.minimal_incident import MinimalIncident
    from lab.simulate.sim import Simulation

    sc = _incident(n)
    runs = {"minimal": lambda: MinimalIncident(sc).run(), "lab": lambda: Simulation(sc).run()}
    for run in runs.values():
        run()  # first runs fill caches and import lazily: not what a run costs
    calls = {name: _profiled_calls(run) for name, run in runs.items()}
    return round(calls["lab"] / calls["minimal"], 4)


#: Recorded load tests of the shipped scenarios (`lab loadtest FILE --trace ...`), kept so
#: the fit -> simulate -> compare round trip is measured on the same real runs every time.
RUNS = ROOT / "benchmarks" / "runs"


@figure("fit_round_trip")
def fit_round_trips() -> dict[str, dict[str, Any]]:
    """`lab fit` on each recorded load test, the fitted scenario simulated and compared
    with the recorded report: the relative differences a person sizing limits reads."""
    from lab.fit.fitting import fit_trace, fitted_scenario
    from lab.loadtest.compare import compare_reports
    from lab.scenario import parse_scenario
    from lab.simulate.run import run_scenario

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


#: How far a store's runner / minimal CPU ratio may rise above its baseline. Sized from its
#: spread: 15 gate-sized measurements (median of 5 alternating rounds of 10k tasks) on the
#: 2-core machine, 4 of them beside two busy-looping processes, ranged 0.88-1.07 x their
#: median on both stores (PostgreSQL 1.18-1.42, SQLite 3.60-4.39); 8 more on the grouped
#: runtime with its commit window, half of them beside a test suite and other work, ranged
#: 0.85-1.25 x (PostgreSQL 1.15-1.56, SQLite 3.20-4.63), which a 1.20 slack would have
#: failed. The wall-time ratio of the same runs swung 0.93-2.67 on
#: SQLite (fsync latency and CPU contention hit the two loops unequally), so it cannot be
#: gated; CPU per task is what the runtime adds, and what a commit per task or a claim per
#: task (2-3 x) would raise. A green or red that depends on the machine's mood would make the
#: same commit pass and fail: the slack is wider than the spread seen, not tight to it.
STORE_RATIO_SLACK = 1.40
#: (Their baselines are the medians of the 8 later runs, not one run's figure.)


def _store_cpu_ratio(kind: str, n: int = 10_000, rounds: int = 5) -> float | None:
    """Median over alternating rounds of CPU seconds of this process: Runner(workers=4)
    draining n no-op tasks / the minimal grouped loop (benchmarks/test_bench_throughput)
    draining n rows of a bare table, on the same database. None without PostgreSQL."""
    from benchmarks.test_bench_stores import _pg_ok
    from benchmarks.test_bench_throughput import WORKERS, MinimalN, RunnerRig

    if kind == "postgres" and not _pg_ok():
        return None
    runner, minimal = RunnerRig(kind, n=n), MinimalN(kind, WORKERS, n=n)
    ratios = []
    try:
        for _ in range(rounds):
            minimal.fresh()
            t = time.process_time()
            minimal.drain(True)
            base = time.process_time() - t
            runner.fresh()
            t = time.process_time()
            runner.drain()
            ratios.append((time.process_time() - t) / base)
    finally:
        runner.close()
        minimal.close()
    return round(statistics.median(ratios), 3)


def _optional_ratio(slack: float) -> Compare:
    """ratio_within(slack), except that a store this machine lacks is no regression (the
    store tests themselves fail in CI when PostgreSQL is missing)."""
    within = ratio_within(slack)

    def compare(name: str, now: float | None, base: float) -> list[str]:
        return [] if now is None else within(name, now, base)
    return compare


@figure("sqlite_runner_over_minimal_cpu", compare=_optional_ratio(STORE_RATIO_SLACK),
        timed=True)
def sqlite_runner_ratio() -> float | None:
    return _store_cpu_ratio("sqlite")


@figure("postgres_runner_over_minimal_cpu", compare=_optional_ratio(STORE_RATIO_SLACK),
        timed=True)
def postgres_runner_ratio() -> float | None:
    return _store_cpu_ratio("postgres")


# -- measuring and comparing ------------------------------------------------------------------


def measure(timed: bool = True, only: list[str] | None = None) -> dict[str, Any]:
    """{figure name: value} for every registered figure (timed ones only when `timed`)."""
    return {name: f.measure() for name, f in FIGURES.items()
            if (timed or not f.timed) and (only is None or name in only)}


def compare(now: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """Regressions of `now` against `base`, one readable line each. A figure measured now
    but absent from the baseline is a problem (baseline it on purpose); one in the baseline
    but not measured now is skipped (a timed figure when timing is off)."""
    problems: list[str] = []
    for name, value in now.items():
        if name not in base:
            problems.append(f"{name}: not in the baseline (run `make baseline`)")
        else:
            problems += FIGURES[name].compare(name, value, base[name])
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
