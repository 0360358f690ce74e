"""lab fit's hang estimator on simulated runs whose hang probability and duration are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.fit.fitting import fit_trace, fitted_scenario
from lab.fit.world import RunFit
from lab.scenario import parse_scenario
from lab.simulate.run import run_scenario

PROBABILITY = 0.05
LOW, HIGH = 10.0, 30.0  # the hang's duration: uniform, mean 20 s


def scenario_text(executor: str) -> str:
    return f"""
name: hangs
seed: 5
horizon_s: 3600
sample_interval_s: 1.0
workers: 20
stuck_threads_max: 20
task_timeout_s: 2
retry: {{max_retry: 1, backoff: {{kind: fixed, base: 0.1, cap: 0.1}}}}
kinds:
  sync: {{executor: {executor}, overlap: false}}
downstreams:
  partner:
    provider:
      latency: {{dist: lognormal, mean: 0.1, cv: 0.3}}
batches:
  - id: jobs
    kind: sync
    count: 2000
    program:
      - call: {{downstream: partner}}
      - hang: {{probability: {PROBABILITY}, duration: {{dist: uniform, low: {LOW}, high: {HIGH}}}}}
      - work: 0.05
"""


def fitted(tmp_path: Path, executor: str) -> RunFit:
    trace = tmp_path / f"{executor}.trace"
    run_scenario(parse_scenario(scenario_text(executor)), trace=trace)
    return fit_trace(trace)


def test_thread_hangs_give_probability_duration_and_the_step(tmp_path: Path) -> None:
    fit = fitted(tmp_path, "thread")
    h = fit.hangs["jobs"]
    assert h.executor == "thread" and h.after == 1
    p = h.probability
    assert p.lo is not None and p.hi is not None and p.lo <= PROBABILITY <= p.hi
    assert p.value == pytest.approx(PROBABILITY, rel=0.25)
    assert h.censored + len(h.durations) == h.hung and h.censored <= 0.1 * h.hung
    # every pairing has the same total: the mean is exact up to the 1 s sampling
    assert h.mean.value == pytest.approx((LOW + HIGH) / 2, rel=0.1)
    assert h.mean.lo is not None and h.mean.hi is not None and h.mean.lo < h.mean.value < h.mean.hi
    program = next(b for b in fit.world()["batches"] if b["id"] == "jobs")["program"]
    assert [next(iter(s)) for s in program] == ["call", "hang", "work"]
    written = parse_scenario(fitted_scenario(fit)).batches[0].program[1]
    assert written.hang.probability == pytest.approx(h.probability.value, rel=0.01)  # type: ignore[union-attr]


def test_process_hangs_are_counted_but_their_duration_is_not_identifiable(tmp_path: Path) -> None:
    fit = fitted(tmp_path, "process")
    h = fit.hangs["jobs"]
    assert h.executor == "process"
    assert h.probability.lo <= PROBABILITY <= h.probability.hi  # type: ignore[operator]
    assert h.mean.value is None and "kills" in h.mean.note
    assert h.bound_s == pytest.approx(2.0 - 0.1, abs=0.2)  # the timeout less the call before
    assert h.step()["hang"]["duration"] >= h.bound_s


def test_a_run_without_timeouts_has_no_hang(tmp_path: Path) -> None:
    text = scenario_text("thread").replace(f"probability: {PROBABILITY}", "probability: 0")
    trace = tmp_path / "none.trace"
    run_scenario(parse_scenario(text), trace=trace)
    fit = fit_trace(trace)
    assert fit.hangs == {}
    assert all("hang" not in s for b in fit.world()["batches"] for s in b["program"])
