"""Sweep throughput: grid points per second with 1 job (in-process) and 2 jobs (processes).

The grid is the incident at 300 tasks per point, 8 values of workers, one seed. The process
pool is started and warmed before timing (its start-up is reported apart as startup_s), so
the figure is the steady rate a long sweep sees. extra_info carries points_per_s from the
median round and the simpy events per point (deterministic, unlike seconds).

    .venv/bin/python -m pytest benchmarks/test_bench_sweep.py --benchmark-only
"""

from __future__ import annotations

import time

import pytest

from lab.sizing.executors import make_executor
from lab.sizing.sweep import Evaluator, Plan, RunStore, run_job, run_sweep

SCENARIO = "scenarios/incident.yaml"
GRID = ["workers=2..16:2"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_points_per_second(benchmark, jobs: int) -> None:
    plan = Plan.from_file(SCENARIO, ["batches.skus.count=300"], GRID, seeds=1)
    executor = make_executor("local", jobs)
    started = time.perf_counter()
    list(executor.map(run_job, [plan.job(p, 7) for p in plan.points()[:jobs]]))  # warm up
    startup = time.perf_counter() - started
    metrics = ["makespan_s", "events"]
    rows: list = []

    def sweep_once() -> None:
        store = RunStore(plan, metrics)  # in memory: every round runs every point
        rows[:] = run_sweep(plan, Evaluator(plan, store, executor), metrics)

    benchmark.group = "sweep throughput (incident, 300 tasks per point)"
    try:
        benchmark.pedantic(sweep_once, rounds=3, iterations=1)
    finally:
        executor.close()
    points = plan.size()
    median = benchmark.stats.stats.median
    benchmark.extra_info.update(
        jobs=jobs, points=points, points_per_s=round(points / median, 2),
        startup_s=round(startup, 3),
        events_per_point=round(sum(r.stats["events"].mean for r in rows) / points),
    )
    assert len(rows) == points
