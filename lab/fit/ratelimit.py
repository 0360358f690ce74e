"""A provider's token bucket (rate, burst), from when its 429s come relative to what was sent.

Theory. A bucket of `burst` tokens refilled at `rate` answers 429 only when it holds less
than one token. Between two consecutive 429s at t_i < t_j it lets through
A_j - A_i = rate (t_j - t_i) + (tokens left after i) - (tokens left at j), the last two
both in [0, 1), as long as it did not fill up in between (demand stayed above the limit);
if it did fill up, fewer went through. Given the rate, the burst follows the same way: the
bucket was full at some moment s before each 429 (it starts full), and from then on
A(s, t) - rate (t - s) = burst minus the (< 1) tokens left at t, so the burst is the largest
such excess over every request s before every 429 t.

Estimate. A first rate is the 90th percentile of (A_j - A_i) / (t_j - t_i) over pairs of
429s at least a tenth of their span apart (robust to a few badly timed requests). Gaps
between consecutive 429s whose count falls short of that rate by more than two requests are
the ones where the bucket filled up; the others form saturated stretches, and the rate is
their pooled count over their pooled time (three rounds). Its 95 % interval is the
telescoped error: one request per stretch over the pooled time, plus the timing of each
stretch's ends (the spread of 429 latencies) at that rate. The burst at that rate is
the largest excess; its interval runs to one more (the tokens left at the 429). A replay of
the recorded requests through the core's own TokenBucket with the fitted numbers gives the
figure of fit: how many 429s it answers against the recorded count (which requests get
them is a coin flip near the limit, where a request and a token arrive within the timing
noise of client and server).

A 429's arrival at the provider is taken as its end less the typical 429 latency (it is
answered a fixed time after it arrives), which is sharper than its start; other requests
are taken at their start.

A run without a 429 shows no limit at all: the rate is then not identifiable (the report
gives the peak request rate that went through, a lower bound if a limit exists).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.fit.data import HTTP_429, Calls
from lab.fit.estimate import Estimate, not_identifiable
from taskfuse.core.ratelimit import TokenBucket

#: Pairs of 429s this share of their whole span apart (or more) give the first rate.
PAIR_SPAN = 0.1
MAX_429_PAIRS = 1500
#: A gap between 429s short of the rate by more than this many requests: the bucket filled.
FILLED = 2.0


@dataclass
class RateLimitFit:
    rate: Estimate
    burst: Estimate
    rejected: int
    requests: int
    replayed_429: int | None  # 429s the fitted bucket answers to the recorded requests
    peak_1s: int  # most requests sent within one second

    def as_json(self) -> dict[str, object]:
        return {"rate_per_s": self.rate.as_json(), "burst": self.burst.as_json(),
                "rejected_429": self.rejected, "requests": self.requests,
                "replayed_429": self.replayed_429, "peak_requests_1s": self.peak_1s}


def fit_rate_limit(calls: Calls) -> RateLimitFit:
    """The provider's bucket from its requests (outage answers already removed)."""
    t, rejected = _arrivals(calls)
    n429 = int(rejected.sum())
    peak = _peak(t)
    if n429 == 0:
        why = (f"no 429 in {len(t)} requests; up to {peak} went through within one second "
               "(a lower bound for the rate, if the provider has a limit)")
        return RateLimitFit(not_identifiable(why), not_identifiable("no 429"), 0, len(t), None,
                            peak)
    accepted_before = np.concatenate([[0], np.cumsum(~rejected)[:-1]]).astype(float)
    t429, a429 = t[rejected], accepted_before[rejected]
    first = _pairwise_rate(t429, a429)
    if first is None:
        return RateLimitFit(not_identifiable(f"{n429} 429s too close together to time a rate"),
                            not_identifiable("no rate"), n429, len(t), None, peak)
    rate, half = _stretch_rate(t429, a429, first)
    lat = calls.latency[calls.outcome == HTTP_429]
    jitter = float(np.percentile(lat, 90) - np.percentile(lat, 10))
    half += 2 * rate * jitter * half  # each stretch's two ends are timed within that jitter
    burst = _burst(rate, t, accepted_before, rejected)
    replayed = len(t) - _replay_accepted(rate, burst, t)
    return RateLimitFit(
        Estimate(rate, rate - half, rate + half, "pooled saturated stretches between 429s"),
        Estimate(burst, _burst(rate + half, t, accepted_before, rejected),
                 _burst(max(rate - half, 1e-9), t, accepted_before, rejected) + 1.0,
                 "largest excess over the rate before a 429"),
        n429, len(t), replayed, peak)


def _arrivals(calls: Calls) -> tuple[np.ndarray, np.ndarray]:
    """When each request reached the bucket, sorted, and whether it was refused.

    A 429 comes back a fixed time after it arrived (the provider's reject latency), so its
    arrival is its end less the typical (10th percentile) 429 latency; that is sharper than
    its start, which also holds the client's own delays (a new connection adds tens of
    milliseconds). Other requests are taken at their start.
    """
    rejected = calls.outcome == HTTP_429
    t = calls.start.copy()
    if rejected.any():
        lat = calls.latency[rejected]
        t[rejected] = calls.end[rejected] - float(np.percentile(lat, 10))
    order = np.argsort(t, kind="stable")
    return t[order], rejected[order]


def _peak(t: np.ndarray) -> int:
    if not len(t):
        return 0
    ends = np.searchsorted(t, t + 1.0, side="left")
    return int((ends - np.arange(len(t))).max())


def _pairwise_rate(t429: np.ndarray, acc: np.ndarray) -> float | None:
    """90th percentile of (A_j - A_i) / (t_j - t_i) over pairs of 429s far enough apart."""
    if len(t429) > MAX_429_PAIRS:
        pick = np.linspace(0, len(t429) - 1, MAX_429_PAIRS).astype(int)
        t429, acc = t429[pick], acc[pick]
    span = float(t429[-1] - t429[0])
    if span <= 0:
        return None
    dt = t429[None, :] - t429[:, None]
    far = dt >= PAIR_SPAN * span
    if not far.any():
        return None
    rate = float(np.percentile((acc[None, :] - acc[:, None])[far] / dt[far], 90))
    return rate if rate > 0 else None


def _stretch_rate(t429: np.ndarray, acc: np.ndarray, rate: float) -> tuple[float, float]:
    """(rate, 95 % half-width) pooled over saturated stretches (module doc)."""
    gaps, counts = np.diff(t429), np.diff(acc)
    half = 0.0
    for _ in range(3):
        inside = (rate * gaps - counts <= FILLED) & (gaps > 0)
        pooled = float(gaps[inside].sum())
        if pooled <= 0:
            return rate, rate
        rate = float(counts[inside].sum()) / pooled
        stretches = int(np.sum(np.diff(np.concatenate([[0], inside.astype(int), [0]])) == 1))
        half = stretches / pooled
    return rate, half


def _burst(rate: float, t: np.ndarray, acc: np.ndarray, rejected: np.ndarray) -> float:
    """The smallest burst that explains every 429 at this rate (see module doc), >= 1."""
    lead = np.maximum.accumulate(rate * t - acc)  # best window start before each request
    excess = acc - rate * t + lead
    return float(max(1.0, excess[rejected].max()))


def _replay_accepted(rate: float, burst: float, t: np.ndarray) -> int:
    """How many of the recorded requests a bucket with these numbers lets through."""
    bucket = TokenBucket(rate, max(1.0, burst), start=min(0.0, float(t[0])))
    take = bucket.try_acquire
    return sum(take(when) for when in t.tolist())
