"""A provider's token bucket (rate, burst), from when its 429s come relative to what was sent.

Theory. A bucket of `burst` tokens refilled at `rate` lets through at most
burst + rate x T requests in any T seconds, and answers 429 only when it is empty
(fewer than one token). So for two 429s at t_i < t_j, the requests let through between them
number A_j - A_i < rate (t_j - t_i) + 1: every pair of 429s bounds the rate from below, and
the bound is tight when the bucket never filled up in between (demand stayed above the
limit). Given the rate, the burst follows the same way: the bucket was full at some moment
s before each 429 (it starts full), and from that moment A(s, t) - rate (t - s) = burst
minus the (< 1) tokens left at t, so burst = the largest such excess over every request s
before every 429 t.

Estimate. The rate starts at the largest lower bound over pairs of 429s at least a tenth of
their span apart; around it, each candidate rate (with its burst) replays the recorded
requests through the core's own TokenBucket, and the candidate that reproduces the most
of the recorded 429-or-not answers wins. The interval is every candidate whose replay
misses at most `PROFILE_SLACK` more answers than the best (at least two), widened by half a
step of the search: what the recorded answers cannot tell apart. Near the limit many answers
are a coin flip (a request and a token arriving within the timing noise of client and server),
so the share of answers reproduced is a figure of that noise as much as of the fit.

A run without a 429 shows no limit at all: the rate is then not identifiable (the report
gives the peak request rate that went through, a lower bound if a limit exists).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.fit.data import HTTP_429, Calls
from lab.fit.estimate import Estimate, not_identifiable
from taskfuse.core.ratelimit import TokenBucket

#: Candidate rates searched above the pairwise lower bound, as a factor of it.
SEARCH_SPAN = 1.25
CANDIDATES = 49
#: The interval: candidates missing at most this share of requests more than the best.
PROFILE_SLACK = 0.002
#: Pairs of 429s this share of their whole span apart (or more) bound the rate.
PAIR_SPAN = 0.1
MAX_429_PAIRS = 1500


@dataclass
class RateLimitFit:
    rate: Estimate
    burst: Estimate
    rejected: int
    requests: int
    agreement: float | None  # share of recorded answers the fitted bucket reproduces
    peak_1s: int  # most requests sent within one second

    def as_json(self) -> dict[str, object]:
        return {"rate_per_s": self.rate.as_json(), "burst": self.burst.as_json(),
                "rejected_429": self.rejected, "requests": self.requests,
                "replay_agreement": None if self.agreement is None else round(self.agreement, 4),
                "peak_requests_1s": self.peak_1s}


def fit_rate_limit(calls: Calls) -> RateLimitFit:
    """The provider's bucket from its requests (outage answers already removed)."""
    t = calls.start
    rejected = calls.outcome == HTTP_429
    n429 = int(rejected.sum())
    peak = _peak(t)
    if n429 == 0:
        why = (f"no 429 in {len(t)} requests; up to {peak} went through within one second "
               "(a lower bound for the rate, if the provider has a limit)")
        return RateLimitFit(not_identifiable(why), not_identifiable("no 429"), 0, len(t), None,
                            peak)
    accepted_before = np.concatenate([[0], np.cumsum(~rejected)[:-1]]).astype(float)
    lower = _pairwise_lower_bound(t[rejected], accepted_before[rejected])
    if lower is None:
        return RateLimitFit(not_identifiable(f"{n429} 429s too close together to bound a rate"),
                            not_identifiable("no rate"), n429, len(t), None, peak)
    rates = np.linspace(lower * 0.98, lower * SEARCH_SPAN, CANDIDATES)
    bursts = np.array([_burst(r, t, accepted_before, rejected) for r in rates])
    misses = np.array([_replay_misses(r, b, t, rejected) for r, b in zip(rates, bursts,
                                                                        strict=True)])
    best = int(misses.min())
    tied = np.flatnonzero(misses == best)
    pick = int(tied[len(tied) // 2])
    slack = max(2, int(PROFILE_SLACK * len(t)))
    near = np.flatnonzero(misses <= best + slack)
    half_step = (rates[1] - rates[0]) / 2
    rate = Estimate(float(rates[pick]), float(min(rates[near].min() - half_step, lower)),
                    float(rates[near].max() + half_step), "replay of the recorded requests")
    burst = Estimate(float(bursts[pick]), float(bursts[near].min()),
                     float(bursts[near].max()) + 1.0, "largest excess over the rate before a 429")
    return RateLimitFit(rate, burst, n429, len(t), 1.0 - best / len(t), peak)


def _peak(t: np.ndarray) -> int:
    if not len(t):
        return 0
    ends = np.searchsorted(t, t + 1.0, side="left")
    return int((ends - np.arange(len(t))).max())


def _pairwise_lower_bound(t429: np.ndarray, acc: np.ndarray) -> float | None:
    """max over pairs of 429s far enough apart of (A_j - A_i - 1) / (t_j - t_i)."""
    if len(t429) > MAX_429_PAIRS:
        pick = np.linspace(0, len(t429) - 1, MAX_429_PAIRS).astype(int)
        t429, acc = t429[pick], acc[pick]
    span = float(t429[-1] - t429[0])
    if span <= 0:
        return None
    dt = t429[None, :] - t429[:, None]
    da = acc[None, :] - acc[:, None] - 1.0
    far = dt >= PAIR_SPAN * span
    if not far.any():
        return None
    bound = float((da[far] / dt[far]).max())
    return bound if bound > 0 else None


def _burst(rate: float, t: np.ndarray, acc: np.ndarray, rejected: np.ndarray) -> float:
    """The smallest burst that explains every 429 at this rate (see module doc), >= 1."""
    lead = np.maximum.accumulate(rate * t - acc)  # best window start before each request
    excess = acc - rate * t + lead
    return float(max(1.0, excess[rejected].max()))


def _replay_misses(rate: float, burst: float, t: np.ndarray, rejected: np.ndarray) -> int:
    """Requests whose 429-or-not answer this bucket would have given differently."""
    bucket = TokenBucket(rate, burst, start=min(0.0, float(t[0])))
    take = bucket.try_acquire
    misses = 0
    for when, was_rejected in zip(t.tolist(), rejected.tolist(), strict=True):
        if take(when) == was_rejected:
            misses += 1
    return misses
