"""Durations (service times, queries, local work): empirical percentiles and a fitted family.

A lognormal is fitted by the mean and log-spread of its logarithm (sigma^2 = ln(1 + cv^2),
mean = exp(mu + sigma^2 / 2)), an exponential by its mean; the family with the smaller
Kolmogorov-Smirnov distance D (the largest gap between the recorded and the fitted CDF) is
written, unless both miss by more than `EMPIRICAL_KS`, or (with 200 samples or more) the
family's p99 is more than 10 % off the recorded one, when the recorded percentiles are
written instead (the `empirical` distribution); the report still gives the family's mean and
cv. Nearly constant values (cv < 2 %) become a
constant.

Censoring: a call the client gave up on says only "longer than the timeout". When a share of
the samples is censored like that, the lognormal is fitted on the probability plot of the
uncensored part (ln x against the normal quantile of its rank among all samples), which
stays unbiased as long as fewer than half are censored; the mean of an exponential counts
the censored ones at the timeout (its maximum likelihood).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from lab.fit.estimate import BOOTSTRAP_ROUNDS, Estimate, rng_for

#: Above this KS distance neither family describes the data: write the percentiles.
EMPIRICAL_KS = 0.08
#: With this many samples, a family whose p99 is further than TAIL_MISS from the recorded p99
#: is not written either: the tail is what queues and timeouts feel.
TAIL_SAMPLES = 200
TAIL_MISS = 0.1
CONSTANT_CV = 0.02
#: Censored shares below this are ignored (the plain fit is then the better one).
CENSORED_SHARE = 0.005
PERCENTILES = (0, 1, 5, 10, 25, 50, 75, 90, 95, 97.5, 99, 99.5, 99.9, 100)
_erf = np.frompyfunc(math.erf, 1, 1)
_NORMAL = NormalDist()


@dataclass
class DurationFit:
    """A fitted duration: what is written (`spec`: `family`) and how well it fits. `mean` and
    `cv` are the fitted lognormal's (the exponential's when that is written), with the KS
    distance of each family in `ks_by_family`."""

    n: int
    censored: int
    family: str
    mean: Estimate
    cv: Estimate
    ks: float
    ks_by_family: dict[str, float] = field(default_factory=dict)
    percentiles: dict[float, float] = field(default_factory=dict)

    def spec(self) -> Any:
        """The scenario's distribution for it (a plain number for a constant)."""
        mean = _sig(self.mean.value or 0.0)
        if self.family == "constant":
            return mean
        if self.family == "exponential":
            return {"dist": "exponential", "mean": mean}
        if self.family == "lognormal":
            return {"dist": "lognormal", "mean": mean, "cv": _sig(self.cv.value or 0.0)}
        return {"dist": "empirical", "percentiles": {q: _sig(v) for q, v in
                                                     self.percentiles.items()}}

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "censored": self.censored, "family": self.family,
                "mean_s": self.mean.as_json(), "cv": self.cv.as_json(), "ks": round(self.ks, 4),
                "ks_by_family": {k: round(v, 4) for k, v in self.ks_by_family.items()},
                "percentiles_s": {q: _sig(v) for q, v in self.percentiles.items()}}


def fit_durations(values: np.ndarray, name: str, censored: int = 0) -> DurationFit | None:
    """Fit recorded durations (seconds); `censored` more samples were only known to be longer
    than every recorded one (client timeouts). None when nothing was recorded."""
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) < 2:
        return None
    total = len(x) + censored
    if censored / total < CENSORED_SHARE:
        censored, total = 0, len(x)
    pct = {q: float(np.percentile(x, q)) for q in PERCENTILES}
    mu, sigma = _lognormal_params(x, total)
    if censored == 0 and float(np.std(x)) / float(np.mean(x)) < CONSTANT_CV:
        mean = float(np.mean(x))
        return DurationFit(len(x), 0, "constant", Estimate(mean, float(x[0]), float(x[-1]),
                                                           "recorded range"),
                           Estimate(0.0, how="recorded"), 0.0, {}, pct)
    exp_mean = (float(np.sum(x)) + censored * float(x[-1])) / len(x)
    ks = {"lognormal": _ks(x, total, _lognormal_cdf(x, mu, sigma)),
          "exponential": _ks(x, total, 1.0 - np.exp(-x / exp_mean))}
    family = min(ks, key=ks.__getitem__)
    if censored == 0 and (ks[family] > EMPIRICAL_KS or _misses_tail(family, x, mu, sigma,
                                                                     exp_mean)):
        family = "empirical"
    mean, cv = _mean_cv("lognormal" if family == "empirical" else family, x, total, name)
    return DurationFit(len(x), censored, family, mean, cv, ks.get(family, 0.0), ks, pct)


def _misses_tail(family: str, x: np.ndarray, mu: float, sigma: float, exp_mean: float) -> bool:
    """With enough samples to know it, does the family's p99 miss the recorded one?"""
    if len(x) < TAIL_SAMPLES:
        return False
    recorded = float(np.percentile(x, 99))
    z99 = _NORMAL.inv_cdf(0.99)
    fitted = math.exp(mu + sigma * z99) if family == "lognormal" else exp_mean * math.log(100)
    return abs(fitted / recorded - 1.0) > TAIL_MISS


def _lognormal_params(x: np.ndarray, total: int) -> tuple[float, float]:
    """(mu, sigma) of ln x: moments when nothing is censored, else the probability plot."""
    logs = np.log(x)
    if total == len(x):
        return float(np.mean(logs)), float(np.std(logs, ddof=1))
    ranks = (np.arange(1, len(x) + 1) - 0.5) / total
    keep = ranks >= 0.01
    if keep.sum() < 3:
        keep = np.ones(len(x), bool)
    z = np.array([_NORMAL.inv_cdf(p) for p in ranks[keep]])
    sigma, mu = np.polyfit(z, logs[keep], 1)
    return float(mu), float(max(sigma, 1e-9))


def _lognormal_cdf(x: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    z = (np.log(x) - mu) / (sigma * math.sqrt(2))
    return 0.5 * (1.0 + _erf(z).astype(float))


def _ks(x: np.ndarray, total: int, cdf: np.ndarray) -> float:
    """KS distance on the recorded part: the empirical CDF counts ranks among all samples."""
    n = len(x)
    above = np.arange(1, n + 1) / total
    below = np.arange(0, n) / total
    return float(max(np.max(np.abs(above - cdf)), np.max(np.abs(cdf - below))))


def _stats(family: str, x: np.ndarray, total: int) -> tuple[float, float]:
    """(mean, cv) of the fitted family on sorted samples x (of `total`)."""
    if family == "exponential":
        extra = (total - len(x)) * float(x[-1])
        return (float(np.sum(x)) + extra) / len(x), 1.0
    mu, sigma = _lognormal_params(x, total)
    return math.exp(mu + sigma * sigma / 2), math.sqrt(math.expm1(sigma * sigma))


def _mean_cv(family: str, x: np.ndarray, total: int, name: str) -> tuple[Estimate, Estimate]:
    """The fitted mean and cv with percentile-bootstrap intervals (resampling all samples,
    censored ones included)."""
    mean, cv = _stats(family, x, total)
    rng = rng_for(name)
    censored = total - len(x)
    means, cvs = [], []
    for _ in range(BOOTSTRAP_ROUNDS):
        pick = rng.integers(0, total, total)
        kept = np.sort(x[pick[pick < len(x)]])
        if len(kept) < 2:
            continue
        m, c = _stats(family, kept, total)  # the rest of the resample was censored
        means.append(m)
        cvs.append(c)
    how = ("bootstrap over the samples (sampling error only)"
           + (f", {censored} censored at the timeout" if censored else ""))
    return (Estimate(mean, *_pct(means), how), Estimate(cv, *_pct(cvs), how)
            if family != "exponential" else Estimate(1.0, 1.0, 1.0, "exponential: cv = 1"))


def _pct(draws: list[float]) -> tuple[float | None, float | None]:
    if not draws:
        return None, None
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _sig(x: float) -> float:
    """Four significant digits: fitted numbers are not more precise than that."""
    return float(f"{x:.4g}")
