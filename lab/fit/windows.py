"""Outages and slowdowns: time windows where a provider's answers change, found as change points.

Calls are taken in order of their start. Binary segmentation splits that sequence where the
cost of describing it with one level drops the most, as long as the drop beats a penalty
(3 ln N, in units of the cost; a BIC-like margin that keeps timing noise from making
windows): for outages the level is the share of errors (Bernoulli deviance), for slowdowns
the mean log latency (squared error, in units of the noise variance). Segments then become
windows only when the change is large:

* an outage: at least half of the calls fail and at least five times as often as outside.
  It is `error` mode (answered at once with its error after `latency_s`) when its errors
  come back faster than half a normal call, else `hang` (the calls wait until the window
  ends). Client timeouts do not count as outage errors: from the client's side a hang that
  times out looks like an overloaded provider, so those are left to the latency and capacity
  fits;
* a slowdown: the median latency at least `MIN_FACTOR` times the one outside every window;
  its factor is the ratio of the medians (a call that timed out counts as longer than any),
  with a bootstrap 95 % interval.

Each window's edges are as precise as the calls around them: `edge_s` is the widest gap
between the calls on either side of an edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from lab.fit.data import HTTP_429, OK, TIMEOUT, Calls
from lab.fit.estimate import BOOTSTRAP_ROUNDS, rng_for

MIN_FACTOR = 1.5
MIN_SEGMENT = 10
#: A window holds at least this many calls: fewer (the first calls of a run opening their
#: connections, say) are an episode, not a window of the provider's.
MIN_WINDOW_CALLS = 30
MAX_SPLITS = 24


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    calls: int
    #: How precisely the data places the edges: the widest gap between the calls on either
    #: side of an edge (a change between two calls could be anywhere between them).
    edge_s: float = 0.0

    def covers(self, t: np.ndarray) -> np.ndarray:
        return (t >= self.start_s) & (t < self.end_s)


@dataclass(frozen=True)
class OutageWindow(Window):
    mode: str = "error"
    error: str = "http_503"
    latency_s: float = 0.005
    error_share: float = 1.0

    def spec(self) -> dict[str, object]:
        out: dict[str, object] = {"start_s": _t(self.start_s), "end_s": _t(self.end_s),
                                  "mode": self.mode, "error": self.error}
        if self.mode == "error":
            out["latency_s"] = _t(self.latency_s)
        return out


@dataclass(frozen=True)
class SlowdownWindow(Window):
    factor: float = 2.0
    factor_ci: tuple[float, float] = (math.nan, math.nan)

    def spec(self) -> dict[str, object]:
        return {"start_s": _t(self.start_s), "end_s": _t(self.end_s),
                "factor": float(f"{self.factor:.3g}")}


def find_outages(calls: Calls) -> list[OutageWindow]:
    """Outage windows of one provider (module doc)."""
    failed = ~np.isin(calls.outcome, [OK, HTTP_429, TIMEOUT])
    if failed.sum() < MIN_SEGMENT:
        return []
    x = failed.astype(float)
    bounds = segment(x, _bernoulli_cost, 3.0 * math.log(len(x)))
    share = [float(x[a:b].mean()) for a, b in bounds]
    hot = [i for i, p in enumerate(share) if p >= 0.5]
    outside = np.ones(len(x), bool)
    for i in hot:
        outside[bounds[i][0]:bounds[i][1]] = False
    base = float(x[outside].mean()) if outside.any() else 0.0
    normal = float(np.median(calls.latency[~failed])) if (~failed).any() else math.inf
    windows = []
    for i in _merge(hot):
        a, b = bounds[i[0]][0], bounds[i[-1]][1]
        if float(x[a:b].mean()) >= 5 * base and b - a >= MIN_WINDOW_CALLS:
            window = _outage(calls.where(slice(a, b)), normal)
            windows.append(replace(window, edge_s=_edge(calls.start, a, b)))
    return windows


def _edge(t: np.ndarray, a: int, b: int) -> float:
    """The widest gap between the calls on either side of the edges of [a, b)."""
    gaps = [t[a] - t[a - 1] if a > 0 else 0.0, t[b] - t[b - 1] if b < len(t) else 0.0]
    return round(float(max(gaps)), 6)


def _outage(part: Calls, normal: float) -> OutageWindow:
    failed = ~np.isin(part.outcome, [OK, HTTP_429, TIMEOUT])
    kinds, counts = np.unique(part.outcome[failed], return_counts=True)
    error = str(kinds[int(np.argmax(counts))])
    latency = float(np.median(part.latency[failed]))
    start = float(part.start[failed].min())
    if latency < 0.5 * normal:
        return OutageWindow(start, float(part.start[failed].max()) + 1e-3, len(part),
                            mode="error", error=error, latency_s=latency,
                            error_share=float(failed.mean()))
    return OutageWindow(start, float(np.median(part.end[failed])), len(part), mode="hang",
                        error=error, latency_s=latency, error_share=float(failed.mean()))


def find_slowdowns(calls: Calls, usable: np.ndarray) -> list[SlowdownWindow]:
    """Slowdown windows among the `usable` calls (served, outside outages)."""
    part = calls.where(usable & (calls.outcome != HTTP_429))
    if len(part) < 3 * MIN_SEGMENT:
        return []
    logs = np.log(np.maximum(part.latency, 1e-9))
    diffs = np.diff(logs)
    sigma = float(np.median(np.abs(diffs - np.median(diffs)))) / 0.6745 / math.sqrt(2)
    if sigma <= 0:
        return []
    bounds = segment(logs / sigma, _gauss_cost, 3.0 * math.log(len(logs)))
    medians = [_median(part.latency[a:b], part.outcome[a:b]) for a, b in bounds]
    overall = _median(part.latency, part.outcome)
    slow = [i for i, m in enumerate(medians) if m >= MIN_FACTOR * overall]
    inside = np.zeros(len(part), bool)
    for i in slow:
        inside[bounds[i][0]:bounds[i][1]] = True
    base = _median(part.latency[~inside], part.outcome[~inside]) if (~inside).any() else overall
    windows = []
    for run in _merge(slow):
        a, b = bounds[run[0]][0], bounds[run[-1]][1]
        factor = _median(part.latency[a:b], part.outcome[a:b]) / base
        if factor >= MIN_FACTOR and b - a >= MIN_WINDOW_CALLS:
            end = float(part.start[b]) if b < len(part) else float(part.end[b - 1])
            windows.append(SlowdownWindow(float(part.start[a]), end, b - a,
                                          edge_s=_edge(part.start, a, b), factor=factor,
                                          factor_ci=_factor_ci(part, a, b, ~inside)))
    return windows


def _factor_ci(part: Calls, a: int, b: int, outside: np.ndarray) -> tuple[float, float]:
    """Bootstrap 95 % interval of the ratio of medians (window over outside)."""
    rng = rng_for(f"slowdown:{a}:{b}")
    lat_in, out_in = part.latency[a:b], part.outcome[a:b]
    lat_out, out_out = part.latency[outside], part.outcome[outside]
    if not len(lat_out):
        return math.nan, math.nan
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        i = rng.integers(0, len(lat_in), len(lat_in))
        o = rng.integers(0, len(lat_out), len(lat_out))
        draws.append(_median(lat_in[i], out_in[i]) / _median(lat_out[o], out_out[o]))
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _median(latency: np.ndarray, outcome: np.ndarray) -> float:
    """Median latency, a timed-out call counting as longer than every other."""
    x = np.where(outcome == TIMEOUT, np.inf, latency)
    m = float(np.median(x))
    return m if math.isfinite(m) else float(np.max(latency))


def _merge(indices: list[int]) -> list[list[int]]:
    """Runs of adjacent segment indices."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


# -- binary segmentation -------------------------------------------------------------------


def segment(x: np.ndarray, cost: object, penalty: float,
            min_size: int = MIN_SEGMENT) -> list[tuple[int, int]]:
    """Segments [a, b) of x by binary segmentation; `cost(cs, cs2, n)` is a segment's cost
    from its sum, sum of squares and length (vectorized)."""
    cs = np.concatenate([[0.0], np.cumsum(x)])
    cs2 = np.concatenate([[0.0], np.cumsum(x * x)])
    f = cost  # type: ignore[assignment]

    def seg_cost(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        return f(cs[b] - cs[a], cs2[b] - cs2[a], np.asarray(b) - np.asarray(a))  # type: ignore[operator,no-any-return]

    out: list[tuple[int, int]] = []
    todo = [(0, len(x))]
    splits = 0
    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_size or splits >= MAX_SPLITS:
            out.append((a, b))
            continue
        k = np.arange(a + min_size, b - min_size + 1)
        gain = seg_cost(a, b) - seg_cost(a, k) - seg_cost(k, b)
        best = int(np.argmax(gain))
        if gain[best] <= penalty:
            out.append((a, b))
            continue
        splits += 1
        todo += [(int(k[best]), b), (a, int(k[best]))]
    return sorted(out)


def _gauss_cost(s: np.ndarray, s2: np.ndarray, n: np.ndarray) -> np.ndarray:
    return s2 - s * s / np.maximum(n, 1)


def _bernoulli_cost(s: np.ndarray, s2: np.ndarray, n: np.ndarray) -> np.ndarray:
    n = np.maximum(np.asarray(n, float), 1.0)
    p = np.clip(s / n, 1e-12, 1 - 1e-12)
    ll = s * np.log(p) + (n - s) * np.log(1 - p)
    return np.asarray(-2.0 * np.where((s <= 0) | (s >= n), 0.0, ll))


def _t(x: float) -> float:
    return round(float(x), 3)
