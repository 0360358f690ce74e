"""What a load test's own machinery added to the durations `lab fit` reads, taken out again.

A load test measures, for every call, the latency its client saw less the time the emulated
provider says it spent (the harness's overhead: the client's Python, the interpreter lock
shared with every worker thread, the loopback), and for every timer (a `work` step, a
backoff) how late it woke; its report (`loadtest.harness`) carries the mean and standard
deviation of each in scenario seconds. A recorded duration is then the world's duration
plus that overhead, the two independent: the world's mean is the recorded mean less the
overhead's, its variance the recorded variance less the overhead's, so the fitted mean and
cv are corrected by those moments (an empirical distribution's percentiles are shifted by
the mean). The fitted number's interval stays what it was, the sampling error of the
recorded samples, shifted with it; the spread of the overhead's own mean is not in it, and
its `how` says so.

What neither is corrected for: the emulated provider's own event loop waking late inside the
time it reports as served (a busy machine lengthens service times there too), and, in a
worker's trace (`taskfuse worker --trace`), the runtime's time between a task's return and
its commit, which ends a task's last step: no trace records either. A worker's trace has no
harness figures, and its durations are fitted as recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from lab.fit.estimate import Estimate
from lab.fit.service import DurationFit

#: The corrected mean never goes below this share of the recorded one (an overhead as large
#: as the duration itself says the run cannot separate them; the report shows both).
_FLOOR_SHARE = 0.05


@dataclass(frozen=True)
class Overhead:
    """The mean and standard deviation of what the harness added to one kind of duration."""

    mean_s: float
    sd_s: float
    what: str  # "per call", "per timer"


def call_overheads(report: dict[str, Any] | None) -> dict[str, Overhead]:
    """Per downstream, the harness's measured overhead of a call (none for a worker's trace,
    or a load test that did not record the moments)."""
    calls = _harness(report).get("calls") or {}
    out = {}
    for name, c in calls.items():
        if isinstance(c, dict) and c.get("overhead_mean_s") is not None:
            out[name] = Overhead(float(c["overhead_mean_s"]), float(c.get("overhead_sd_s") or 0),
                                 "per call")
    return out


def timer_overhead(report: dict[str, Any] | None) -> Overhead | None:
    """How late the harness's timers woke, on average (a `work` step is one timer)."""
    t = _harness(report).get("timers") or {}
    if not isinstance(t, dict) or t.get("late_mean_s") is None:
        return None
    return Overhead(float(t["late_mean_s"]), float(t.get("late_sd_s") or 0), "per timer")


def without(fit: DurationFit | None, overhead: Overhead | None) -> DurationFit | None:
    """`fit` with the harness's overhead taken out of its mean and spread (module doc)."""
    if fit is None or overhead is None or overhead.mean_s <= 0 or fit.mean.value is None:
        return fit
    mean = fit.mean.value
    shift = min(overhead.mean_s, mean * (1 - _FLOOR_SHARE))
    said = (f"less the harness's measured {overhead.mean_s * 1000:.3g} ms {overhead.what} "
            f"(mean; sd {overhead.sd_s * 1000:.3g} ms), the interval not widened for it")
    new_mean = Estimate(mean - shift, _minus(fit.mean.lo, shift), _minus(fit.mean.hi, shift),
                        _and(fit.mean.how, said), fit.mean.note)
    cv = fit.cv
    if fit.family not in ("constant", "exponential") and cv.value is not None:
        cv = Estimate(_cv(cv.value, mean, shift, overhead.sd_s),
                      _cv(cv.lo, mean, shift, overhead.sd_s) if cv.lo is not None else None,
                      _cv(cv.hi, mean, shift, overhead.sd_s) if cv.hi is not None else None,
                      _and(cv.how, "the harness's variance taken out"), cv.note)
    floor = min(fit.percentiles.values(), default=mean) * _FLOOR_SHARE
    percentiles = {q: max(floor, v - shift) for q, v in fit.percentiles.items()}
    return replace(fit, mean=new_mean, cv=cv, percentiles=percentiles)


def _cv(cv: float, mean: float, shift: float, sd: float) -> float:
    """The cv of the duration once a part of mean `shift` and deviation `sd` is taken out."""
    variance = (cv * mean) ** 2 - sd**2
    return math.sqrt(max(variance, 0.0)) / (mean - shift)


def _minus(x: float | None, shift: float) -> float | None:
    return None if x is None else max(0.0, x - shift)


def _and(how: str, more: str) -> str:
    return f"{how}; {more}" if how else more


def _harness(report: dict[str, Any] | None) -> dict[str, Any]:
    loadtest = (report or {}).get("loadtest")
    harness = loadtest.get("harness") if isinstance(loadtest, dict) else None
    return harness if isinstance(harness, dict) else {}
