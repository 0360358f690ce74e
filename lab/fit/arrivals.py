"""How work arrived: all at once (closed), as a Poisson stream, or a Poisson stream whose rate
changed (a schedule).

A batch is closed when its submits span no more than a millisecond per thousand seconds of
run. Otherwise the gaps between submits are segmented where the rate changes (binary
segmentation on the exponential likelihood of the gaps, penalty 3 ln N); one segment is
`poisson` at n / span per second, several a `schedule` with a step at each change. Each rate
carries its analytic Poisson 95 % interval, and the KS distance of the gaps (each scaled by
its segment's rate) from the unit exponential says how Poisson the stream looks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.fit.estimate import Estimate, poisson_rate
from lab.fit.windows import segment

#: Segments whose rates differ by less than this share are merged (noise, not a change).
SAME_RATE = 0.2


@dataclass
class ArrivalFit:
    count: int
    kind: str  # closed, poisson or schedule
    start_s: float
    rate: Estimate | None = None
    steps: list[tuple[float, Estimate]] = field(default_factory=list)
    ks: float | None = None

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.start_s > 0:
            out["start_s"] = round(self.start_s, 3)
        if self.kind == "poisson" and self.rate is not None:
            out["rate"] = _sig(self.rate.value)
        if self.kind == "schedule":
            out["steps"] = [{"at_s": round(at, 3), "rate": _sig(r.value)} for at, r in self.steps]
        return out

    def as_json(self) -> dict[str, Any]:
        return {"count": self.count, "kind": self.kind, "start_s": round(self.start_s, 3),
                "rate_per_s": self.rate.as_json() if self.rate else None,
                "steps": [{"at_s": round(at, 3), "rate_per_s": r.as_json()}
                          for at, r in self.steps],
                "ks_gaps_vs_exponential": None if self.ks is None else round(self.ks, 4)}


#: The span a segment of simultaneous submits is given, so its rate is finite (huge).
_TINY_S = 1e-9


def fit_arrivals(times: np.ndarray, run_s: float) -> ArrivalFit:
    """The arrival process of sorted submit times over a run of `run_s` seconds."""
    t = np.sort(np.asarray(times, float))
    n = len(t)
    if n < 3 or t[-1] - t[0] <= 1e-6 * max(run_s, 1.0):
        return ArrivalFit(n, "closed", float(t[0]) if n else 0.0)
    gaps = np.diff(t)
    if float(np.median(gaps)) <= 0.0:  # most came at one instant with another: a burst (a
        return ArrivalFit(n, "closed", float(t[0]))  # few stragglers do not make a rate)
    bounds = _merge_same(gaps, segment(gaps, _exp_cost, 3.0 * math.log(len(gaps)), 5))
    rates = [poisson_rate(b - a, max(float(gaps[a:b].sum()), _TINY_S)) for a, b in bounds]
    first = rates[0].value or 1.0
    start = float(t[0]) - 1.0 / first if t[0] > 3.0 / first else 0.0
    scaled = np.concatenate([gaps[a:b] * (r.value or 0.0) for (a, b), r in zip(bounds, rates,
                                                                                strict=True)])
    ks = _ks_exponential(scaled)
    if len(bounds) == 1:
        return ArrivalFit(n, "poisson", start, rates[0], ks=ks)
    steps = [(0.0 if i == 0 else float(t[a]), r) for i, ((a, _), r) in enumerate(zip(bounds, rates,
                                                                                    strict=True))]
    return ArrivalFit(n, "schedule", start, rates[0], steps, ks)


def _merge_same(gaps: np.ndarray, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Join neighbouring segments whose rates are within SAME_RATE of each other."""
    out = [bounds[0]]
    for a, b in bounds[1:]:
        pa, pb = out[-1]
        r1 = (pb - pa) / max(float(gaps[pa:pb].sum()), 1e-12)
        r2 = (b - a) / max(float(gaps[a:b].sum()), 1e-12)
        if abs(r2 - r1) <= SAME_RATE * max(r1, r2):
            out[-1] = (pa, b)
        else:
            out.append((a, b))
    return out


def _exp_cost(s: np.ndarray, s2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """-2 log-likelihood of n exponential gaps summing to s, at their best rate n / s."""
    n = np.maximum(np.asarray(n, float), 1.0)
    return np.asarray(2.0 * n * (np.log(np.maximum(s, 1e-12) / n) + 1.0))


def _ks_exponential(x: np.ndarray) -> float:
    x = np.sort(x)
    n = len(x)
    cdf = 1.0 - np.exp(-x)
    return float(max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n)))


def _sig(x: float | None) -> float:
    return float(f"{x or 0.0:.4g}")
