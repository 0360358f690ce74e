"""`lab fit` takes the load test's measured overhead out of what it fits, and its intervals say
what they cover: a duration recorded as work + harness overhead is fitted as the work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.fit.fitting import fit_trace
from lab.fit.overhead import Overhead, without
from lab.fit.service import fit_durations
from taskfuse.trace import TraceWriter

WORK_MEAN, WORK_CV = 0.3, 0.5


def _lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    sigma2 = np.log1p(cv * cv)
    return rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), n)


def test_the_harness_overhead_comes_out_of_the_mean_and_the_spread() -> None:
    rng = np.random.default_rng(7)
    work = _lognormal(rng, WORK_MEAN, WORK_CV, 20_000)
    overhead = rng.exponential(0.06, 20_000)  # what a busy harness adds to each sample
    fit = fit_durations(work + overhead, "test:service")
    assert fit is not None and fit.mean.value == pytest.approx(0.36, rel=0.02)  # +20 %
    less = without(fit, Overhead(float(overhead.mean()), float(overhead.std()), "per call"))
    assert less is not None
    assert less.mean.value == pytest.approx(WORK_MEAN, rel=0.02)
    assert less.cv.value == pytest.approx(WORK_CV, rel=0.05)
    assert "sampling error only" in less.mean.how and "harness" in less.mean.how
    assert less.mean.lo < WORK_MEAN < less.mean.hi


def test_a_load_test_trace_is_fitted_without_its_harness_overhead(tmp_path: Path) -> None:
    """Calls to one provider without queueing: latency = service + a measured overhead."""
    rng = np.random.default_rng(3)
    n = 3000
    service = _lognormal(rng, WORK_MEAN, WORK_CV, n)
    overhead = rng.exponential(0.05, n)
    trace = tmp_path / "run.trace"
    writer = TraceWriter(trace, {"source": "loadtest", "series": [],
                                 "meta": {"downstreams": ["api"], "workers": 8}})
    for i in range(n):
        start, latency = i * 0.5, float(service[i] + overhead[i])
        writer.event((start, "submit", f"t{i}", "b", None, None, "PENDING", None, 1, None, None,
                      None))
        writer.event((start, "move", f"t{i}", "b", None, "PENDING", "RUNNING", "claim", 1, "w",
                      None, None))
        writer.event((start + latency, "call", f"t{i}", "b", None, None, None, "ok", 1, None,
                      "api", latency))
        writer.event((start + latency, "move", f"t{i}", "b", None, "RUNNING", "SUCCESS", "ok", 1,
                      "w", None, None))
    harness = {"calls": {"api": {"overhead_mean_s": float(overhead.mean()),
                                 "overhead_sd_s": float(overhead.std())}},
               "timers": {}}
    writer.close({"sim_time_s": n * 0.5 + 2, "loadtest": {"harness": harness}})
    fitted = fit_trace(trace).providers["api"].service
    assert fitted is not None
    assert fitted.mean.value == pytest.approx(WORK_MEAN, rel=0.03)  # +17 % as recorded

