"""The lab against the minimal hand-written model of the incident, in the same run.

For each size the two run alternately (A B A B ...); extra_info carries both medians (CPU
seconds of this process: on a shared machine, time spent waiting for a core is not the
model's), the ratio lab / minimal, and simpy events per task of each (deterministic, unlike
seconds). The gateway breaker is off in both, since the minimal model has none.

    .venv/bin/python -m pytest benchmarks/test_bench_lab.py --benchmark-only
"""

from __future__ import annotations

import statistics
import time

import pytest

from benchmarks.minimal_incident import MinimalIncident
from lab.run import run_scenario
from lab.scenario import load_scenario
from lab.sim import Simulation

SIZES = [3_000, 30_000, 300_000]
ROUNDS = {3_000: 5, 30_000: 3, 300_000: 1}


def _scenario(n: int):
    """The incident at n SKUs, with a horizon past its end (about n / 24 s of simulated
    time) that keeps the business traffic within the lab's bound on requests (2,000,000)."""
    return load_scenario("scenarios/incident.yaml",
                         ["business.breaker=null", f"batches.skus.count={n}",
                          f"horizon_s={max(3600, n // 10)}"])


@pytest.mark.parametrize("n", SIZES)
def test_lab_vs_minimal(benchmark, n: int) -> None:
    sc = _scenario(n)
    lab_s: list[float] = []
    min_s: list[float] = []

    def both() -> Simulation:
        t = time.process_time()
        minimal = MinimalIncident(sc).run()
        min_s.append(time.process_time() - t)
        t = time.process_time()
        sim = Simulation(sc).run()
        lab_s.append(time.process_time() - t)
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
