"""One downstream's provider, fitted from its calls: the estimators in the order they need
each other.

1. outage windows (their answers say nothing about latency, limits or the error mix);
2. slowdown windows among the rest, on calls that did not queue by a first capacity fit
   (latency that grows with calls in flight is queueing, not a slowdown);
3. capacity, on calls outside both windows, which also says which calls did not queue.
   Steps 2 and 3 are also taken the other way round (slowdowns on every call, then capacity
   outside them), since a slowdown puts more calls in flight too: when a connection pool
   caps them, the slow calls are the many-in-flight ones and a first capacity fit calls
   them queued, hiding the window. Of the two explanations, the one whose latencies fit
   every answered call better wins (`_explains`: BIC on log latency);
4. the service time (with capacity) or latency (without), on calls that did not queue,
   client timeouts counted as censored;
5. the token bucket, on every request outside outages;
6. the error mix, on answered requests outside outages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lab.fit.data import HTTP_429, TIMEOUT, Calls
from lab.fit.provider_capacity import CapacityFit, fit_capacity, in_flight
from lab.fit.provider_errors import ErrorFit, fit_errors
from lab.fit.ratelimit import RateLimitFit, fit_rate_limit
from lab.fit.service import DurationFit, fit_durations
from lab.fit.windows import OutageWindow, SlowdownWindow, find_outages, find_slowdowns


@dataclass
class ProviderFit:
    name: str
    calls: int
    outages: list[OutageWindow]
    slowdowns: list[SlowdownWindow]
    capacity: CapacityFit
    service: DurationFit | None
    rate_limit: RateLimitFit
    reject_latency_s: float | None
    errors: ErrorFit

    def spec(self) -> dict[str, Any]:
        """The scenario's `downstreams.NAME.provider` for what was identified."""
        out: dict[str, Any] = {}
        rl = self.rate_limit
        if rl.rate.value is not None and rl.burst.value is not None:
            out["rate"] = float(f"{rl.rate.value:.4g}")
            out["burst"] = float(f"{max(1.0, rl.burst.value):.3g}")
            if self.reject_latency_s is not None:
                out["reject_latency_s"] = float(f"{self.reject_latency_s:.3g}")
        dist = self.service.spec() if self.service is not None else 0.0
        if self.capacity.servers.value is not None:
            out["capacity"] = {"servers": int(self.capacity.servers.value), "service": dist}
        else:
            out["latency"] = dist
        if self.errors.spec():
            out["errors"] = self.errors.spec()
        if self.outages:
            out["outages"] = [w.spec() for w in self.outages]
        if self.slowdowns:
            out["slowdowns"] = [w.spec() for w in self.slowdowns]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "service": self.service.as_json() if self.service else None,
            "capacity": self.capacity.as_json(),
            "rate_limit": self.rate_limit.as_json(),
            "reject_latency_s": self.reject_latency_s,
            "errors": self.errors.as_json(),
            "outages": [w.spec() | {"calls": w.calls, "edge_s": w.edge_s} for w in self.outages],
            "slowdowns": [w.spec() | {"calls": w.calls, "edge_s": w.edge_s,
                                      "factor_ci95": [round(x, 4) for x in w.factor_ci]}
                          for w in self.slowdowns],
        }


def fit_provider(name: str, calls: Calls) -> ProviderFit:
    outages = find_outages(calls)
    outside = ~_covered(calls.start, outages)
    first = fit_capacity(calls, outside, f"{name}:servers")  # queueing is not a slowdown
    slowdowns, capacity = _windows_then_capacity(name, calls, outside, first.unqueued, first)
    if first.servers.identifiable:  # or was the slowness a window that crowded the calls?
        other = _windows_then_capacity(name, calls, outside, outside, first)
        if other[0] and _explains(calls, outside, other) < _explains(
                calls, outside, (slowdowns, capacity)):
            slowdowns, capacity = other
    plain = outside & ~_covered(calls.start, slowdowns)
    base = plain & capacity.unqueued
    answered = base & (calls.outcome != HTTP_429) & (calls.outcome != TIMEOUT)
    timeouts = int(np.sum(base & (calls.outcome == TIMEOUT)))
    service = fit_durations(calls.latency[answered], f"{name}:service", censored=timeouts)
    rejected = outside & (calls.outcome == HTTP_429)
    reject = float(np.median(calls.latency[rejected])) if rejected.any() else None
    return ProviderFit(name, len(calls), outages, slowdowns, capacity, service,
                       fit_rate_limit(calls.where(outside)), reject, fit_errors(calls, outside))


def _windows_then_capacity(name: str, calls: Calls, outside: np.ndarray, usable: np.ndarray,
                           first: CapacityFit) -> tuple[list[SlowdownWindow], CapacityFit]:
    """Slowdown windows among the `usable` calls, then capacity on the calls outside them."""
    found = find_slowdowns(calls, outside & usable)
    slowdowns = [replace(w, calls=int(w.covers(calls.start).sum())) for w in found]
    if not slowdowns:
        return [], first
    plain = outside & ~_covered(calls.start, slowdowns)
    return slowdowns, fit_capacity(calls, plain, f"{name}:servers")


def _explains(calls: Calls, outside: np.ndarray,
              world: tuple[list[SlowdownWindow], CapacityFit]) -> float:
    """BIC of the latencies that `world` predicts for every answered call outside outages:
    m x (window factor at its start) x max(1, n / c), with n the calls in flight at its
    start and m fitted (the median ratio), on log latency. Parameters: m, c when
    identifiable, and three per window (start, end, factor)."""
    slowdowns, capacity = world
    answered = outside & (calls.outcome != HTTP_429) & (calls.outcome != TIMEOUT)
    if answered.sum() < 2:
        return math.inf
    shape = np.ones(len(calls))
    for w in slowdowns:
        shape[w.covers(calls.start)] *= w.factor
    servers = capacity.servers.value
    if servers is not None:
        n = in_flight(calls, calls.outcome != HTTP_429)
        shape *= np.maximum(1.0, n / servers)
    residual = np.log(np.maximum(calls.latency[answered], 1e-9)) - np.log(shape[answered])
    residual -= np.median(residual)
    count = int(answered.sum())
    params = 1 + (servers is not None) + 3 * len(slowdowns)
    return count * math.log(max(float(np.mean(residual ** 2)), 1e-12)) + params * math.log(count)


def _covered(t: np.ndarray, windows: list[Any]) -> np.ndarray:
    mask = np.zeros(len(t), bool)
    for w in windows:
        mask |= w.covers(t)
    return mask
