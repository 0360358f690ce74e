"""The lab against the minimal hand-written model of the incident, in the same run.

For each size the two run alternately (A B A B ...); extra_info carries both medians (CPU
seconds of this process: on a shared machine, time spent waiting for a core is not the
model's), the ratio lab / minimal, and simpy events per task of each (deterministic, unlike
seconds). The gateway breaker is off in both, since the minimal model has none.

Each round also times the core's own share, `core_over_minimal`: the lab's scheduler and
store doing only what a run asks of them per task (submit the batch, then claim one task
and complete it, n times), with no simulation around them. It is the least the lab can cost
above the minimal model while it runs the real core: with 0.15 of it, a ratio of 1.2 would
leave 0.05 for everything else the lab does per task.

    .venv/bin/python -m pytest benchmarks/test_bench_lab.py --benchmark-only
"""

from __future__ import annotations

import statistics
import time

import pytest

from benchmarks.minimal_incident import MinimalIncident
from lab.scenario import load_scenario
from lab.simulate.run import run_scenario
from lab.simulate.sim import OK, Simulation
from taskfuse.tuning import collect_rarely

SIZES = [3_000, 30_000, 300_000]
ROUNDS = {3_000: 5, 30_000: 3, 300_000: 1}


def _scenario(n: int):
    """The incident at n SKUs, with a horizon past its end (about n / 24 s of simulated
    time) that keeps the business traffic within the lab's bound on requests (2,000,000)."""
    return load_scenario("scenarios/incident.yaml",
                         ["business.breaker=null", f"batches.skus.count={n}",
                          f"horizon_s={max(3600, n // 10)}"])


def core_cycle(sc) -> float:
    """CPU seconds of the lab's scheduler and store (built as a run builds them) submitting
    the scenario's one batch and then claiming and completing its tasks one by one, a
    millisecond of scenario time apart: the core's work of a run with nothing simulated."""
    sim = Simulation(sc)
    spec = sc.batches[0]
    scheduler = sim.scheduler
    with collect_rarely():
        t = time.process_time()
        scheduler.submit_batch([], 0.0, spec.id, cap=spec.cap)
        scheduler.submit_many(sim._task_factory(spec).many(0, spec.count), 0.0,
                              batch_id=spec.id)
        claim, complete, now = scheduler.claim, scheduler.complete, 0.0
        for _ in range(spec.count):
            now += 0.001
            complete(claim("w1", now).tasks[0], OK, now)  # type: ignore[union-attr]
        return time.process_time() - t


@pytest.mark.parametrize("n", SIZES)
def test_lab_vs_minimal(benchmark, n: int) -> None:
    sc = _scenario(n)
    lab_s: list[float] = []
    min_s: list[float] = []
    core_s: list[float] = []

    def both() -> Simulation:
        t = time.process_time()
        minimal = MinimalIncident(sc).run()
        min_s.append(time.process_time() - t)
        t = time.process_time()
        sim = Simulation(sc).run()
        lab_s.append(time.process_time() - t)
        core_s.append(core_cycle(sc))
        both.events = (sim.simpy_events, minimal.events)  # type: ignore[attr-defined]
        return sim

    benchmark.group = "lab vs minimal model (incident)"
    sim = benchmark.pedantic(both, rounds=ROUNDS[n], iterations=1)
    lab_events, min_events = both.events  # type: ignore[attr-defined]
    lab_med, min_med = statistics.median(lab_s), statistics.median(min_s)
    benchmark.extra_info.update(
        tasks=n,
        lab_median_s=round(lab_med, 3),
        minimal_median_s=round(min_med, 3),
        ratio=round(lab_med / min_med, 3),
        core_over_minimal=round(statistics.median(core_s) / min_med, 3),
        lab_events_per_task=round(lab_events / n, 2),
        minimal_events_per_task=round(min_events / n, 2),
        lab_events_per_s=round(lab_events / lab_med),
    )
    assert sim.ended_at is not None


@pytest.mark.parametrize("n", [3_000, 30_000])
def test_lab_with_trace(benchmark, n: int, tmp_path) -> None:
    """The whole `lab simulate` path, trace and report included."""
    sc = _scenario(n)
    benchmark.group = "lab simulate with trace (incident)"
    result = benchmark.pedantic(lambda: run_scenario(sc, None, tmp_path / "t.trace"),
                                rounds=3, iterations=1)
    benchmark.extra_info.update(tasks=n, trace_bytes=(tmp_path / "t.trace").stat().st_size)
    assert result.report["finished"]


def _fleet(n: int, executor: str):
    """scenarios/fleet-async.yaml at n SKUs, its kind on `executor`, at the same concurrency
    both ways (2,000 threads or 2,000 coroutines), so the two runs differ only in how the
    lab models the executor."""
    return load_scenario("scenarios/fleet-async.yaml",
                         [f"batches.skus.count={n}", f"kinds.sync.executor={executor}",
                          "workers=2000"])


@pytest.mark.parametrize("n", [5_000, 20_000])
def test_async_vs_thread_model(benchmark, n: int) -> None:
    """What the coroutine model costs over the thread model on the same job: CPU medians of
    the two run alternately, their ratio, and simpy events per task of each."""
    scenarios = {e: _fleet(n, e) for e in ("async", "thread")}
    cpu: dict[str, list[float]] = {e: [] for e in scenarios}
    events: dict[str, int] = {}

    def both() -> Simulation:
        for executor, sc in scenarios.items():
            t = time.process_time()
            sim = Simulation(sc).run()
            cpu[executor].append(time.process_time() - t)
            events[executor] = sim.simpy_events
        return sim

    benchmark.group = "async vs thread model (fleet-async)"
    sim = benchmark.pedantic(both, rounds=3, iterations=1)
    a, t = statistics.median(cpu["async"]), statistics.median(cpu["thread"])
    benchmark.extra_info.update(
        tasks=n, async_median_s=round(a, 3), thread_median_s=round(t, 3),
        ratio=round(a / t, 3),
        async_events_per_task=round(events["async"] / n, 2),
        thread_events_per_task=round(events["thread"] / n, 2),
    )
    assert sim.ended_at is not None
