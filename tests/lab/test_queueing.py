"""The simulator against closed-form queueing results and Little's law.

With Poisson arrivals (rate lam), exponential work (rate mu) and c workers the scheduler and
its workers form an M/M/c queue, whose mean wait before service is given by Erlang's C
formula. Matching it checks claims, idle wake-ups and the worker loop together.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from taskfuse.trace import read_trace

MMC = """
seed: {seed}
horizon_s: 100000
sample_interval_s: 1.0
workers: {c}
watchdog_interval_s: 50
task_timeout_s: 1000
batches:
  - id: q
    count: {n}
    arrival: {{kind: poisson, rate: {lam}}}
    program:
      - work: {{dist: exponential, mean: {mean}}}
"""


def erlang_c(lam: float, mu: float, c: int) -> tuple[float, float]:
    """(probability of waiting, mean time in queue) of an M/M/c system."""
    a = lam / mu
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait, p_wait / (c * mu - lam)


@pytest.mark.parametrize(("lam", "c"), [(7.0, 10), (2.8, 4)])
def test_queue_waits_match_erlang_c(sim, lam: float, c: int) -> None:
    waits: list[float] = []
    for seed in range(1, 7):  # the mean wait of one run at rho 0.7 varies by ~10 %
        run = sim(MMC.format(seed=seed, c=c, n=25_000, lam=lam, mean=1.0))
        waits += run.simulation.stats.first_waits
    p_wait, mean_wait = erlang_c(lam, 1.0, c)
    assert np.mean(np.asarray(waits) > 0) == pytest.approx(p_wait, rel=0.05)
    assert np.mean(waits) == pytest.approx(mean_wait, rel=0.10)


def test_littles_law_holds_on_the_timeline(sim, tmp_path) -> None:
    trace = tmp_path / "q.trace"
    run = sim(MMC.format(seed=4, c=5, n=20_000, lam=4.0, mean=1.0), trace=trace)
    report = run.report
    tr = read_trace(trace)
    _, depth = tr.series("queue_depth")
    _, running = tr.series("running")
    in_system = float(np.mean(depth + running))  # time average: samples every second
    lam = report["tasks"]["submitted"] / report["makespan_s"]
    sojourn = report["wait_s"]["mean"] + report["run_s"]["mean"]
    assert in_system == pytest.approx(lam * sojourn, rel=0.05)
    assert report["run_s"]["mean"] == pytest.approx(1.0, rel=0.03)
