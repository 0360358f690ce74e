"""A provider's capacity (c servers with a FIFO queue), from latency against calls in flight.

Theory. With c servers and mean service time m, a call that finds n calls in the system
(itself included) starts at once when n <= c and otherwise waits for n - c departures, each
coming about m / c apart: its expected latency is m x max(1, n / c). Latency is flat in n up
to c, then grows linearly with slope m / c: a hinge at c.

Estimate. For every call that the provider served (no 429, no outage answer), n is counted
from the recorded starts and ends; calls of the fitted set (no client timeout, outside
slowdown windows) are grouped by n and the hinge m x max(1, n / c) is fitted by least squares
for each c from 1 up to the largest n seen, against the flat line (no capacity limit). The
hinge must beat the flat line by a BIC margin (N ln(SSE_flat / SSE_c) > 2 ln N), and the
calls above the hinge must really be as slow as a queue makes them (their mean latency over
the mean below at least half as far above 1 as the hinge predicts, and 5 % above at least):
harness overhead that grows a little with concurrency is not a capacity.
The interval is a Poisson bootstrap over calls (each call weighted by a Poisson(1) draw);
when the hinge is not found, servers are not identifiable, and at least as many as the most
calls seen in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lab.fit.data import HTTP_429, TIMEOUT, Calls
from lab.fit.estimate import BOOTSTRAP_ROUNDS, Estimate, not_identifiable, rng_for

MIN_GROWTH = 1.05
MIN_ABOVE = 30


@dataclass
class CapacityFit:
    servers: Estimate
    max_in_flight: int
    growth: float | None  # mean latency above the hinge / below it
    unqueued: np.ndarray  # bool per call of the input: served without queueing

    def as_json(self) -> dict[str, object]:
        return {"servers": self.servers.as_json(), "max_in_flight": self.max_in_flight,
                "latency_growth_above_hinge": None if self.growth is None
                else round(self.growth, 3)}


def in_flight(calls: Calls, occupying: np.ndarray) -> np.ndarray:
    """Calls in flight at each call's start, itself included, counting only `occupying` ones."""
    starts = np.sort(calls.start[occupying])
    ends = np.sort(calls.end[occupying])
    at = calls.start
    return (np.searchsorted(starts, at, "right") - np.searchsorted(ends, at, "right")).astype(int)


def fit_capacity(calls: Calls, usable: np.ndarray, name: str) -> CapacityFit:
    """Servers of one provider; `usable` marks the calls to fit on (outside windows)."""
    occupying = calls.outcome != HTTP_429
    n = in_flight(calls, occupying)
    fit_set = usable & occupying & (calls.outcome != TIMEOUT)
    nmax = int(n[occupying].max()) if occupying.any() else 0
    everything = np.ones(len(calls), bool)
    if fit_set.sum() < MIN_ABOVE or nmax < 2:
        return CapacityFit(not_identifiable(f"only {int(fit_set.sum())} usable calls"), nmax,
                           None, everything)
    level, lat = n[fit_set], calls.latency[fit_set]
    c, growth = _hinge(level, lat, np.ones(len(lat)))
    if c is None or growth is None:
        how = "" if growth is None else f", latency grew at most {100 * (growth - 1):.0f} %"
        return CapacityFit(not_identifiable(
            f"no latency hinge against calls in flight (up to {nmax}{how}); servers >= {nmax}"),
            nmax, growth, everything)
    rng = rng_for(name)
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        got, _ = _hinge(level, lat, rng.poisson(1.0, len(lat)).astype(float))
        draws.append(float(got) if got is not None else math.inf)
    arr = np.asarray(draws)
    lo = float(np.percentile(arr, 2.5, method="lower"))
    hi = float(np.percentile(arr, 97.5, method="higher"))
    servers = Estimate(float(c), lo, None if math.isinf(hi) else hi,
                       "hinge of latency against calls in flight, Poisson bootstrap")
    if np.mean(np.isinf(arr)) > 0.1:
        return CapacityFit(not_identifiable(
            f"the hinge at {c} calls in flight is not stable under resampling (gone in "
            f"{100 * np.mean(np.isinf(arr)):.0f} % of resamples)"), nmax, growth, everything)
    return CapacityFit(servers, nmax, growth, n <= c)


def _hinge(level: np.ndarray, lat: np.ndarray, w: np.ndarray) -> tuple[int | None, float | None]:
    """(c, growth) of the best hinge, c None when the flat line is as good (module doc)."""
    k = np.bincount(level, w)
    s = np.bincount(level, w * lat)
    ss = np.bincount(level, w * lat * lat)
    total = float(w.sum())
    if total < MIN_ABOVE:
        return None, None
    ns = np.arange(len(k), dtype=float)
    sse_flat = float(ss.sum() - s.sum() ** 2 / total)
    best_c, best_sse = None, sse_flat
    for c in range(1, len(k) - 1):
        g = np.maximum(1.0, ns / c)
        sse = float(ss.sum() - (g * s).sum() ** 2 / (g * g * k).sum())
        if sse < best_sse:
            best_c, best_sse = c, sse
    if best_c is None:
        return None, 1.0
    above, below = k[best_c + 1:].sum(), k[: best_c + 1].sum()
    if above <= 0 or below <= 0:
        return None, None
    growth = float(s[best_c + 1:].sum() / above) / float(s[: best_c + 1].sum() / below)
    expected = float((ns[best_c + 1:] / best_c * k[best_c + 1:]).sum() / above)
    if (above < MIN_ABOVE or growth < MIN_GROWTH or growth - 1 < 0.5 * (expected - 1)
            or best_sse <= 0 or total * math.log(sse_flat / best_sse) <= 2 * math.log(total)):
        return None, growth
    return best_c, growth
