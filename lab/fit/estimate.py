"""One fitted number and how well the run supports it: an interval, or "not identifiable".

Every estimator of `lab.fit` answers `Estimate` values, so the report can say for each number
how far to trust it. Intervals are 95 %: analytic where a formula exists (a proportion, a
Poisson rate, a token bucket's bounds), otherwise a percentile bootstrap drawn from a numpy
Generator seeded by the quantity's name, so the same trace gives the same report byte for
byte.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Z95 = 1.959964
BOOTSTRAP_ROUNDS = 200


@dataclass(frozen=True)
class Estimate:
    """`value` with its 95 % interval [lo, hi]; `value` None means not identifiable, and
    `note` says why (and what the run does show, e.g. a lower bound)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    how: str = ""
    note: str = ""

    @property
    def identifiable(self) -> bool:
        return self.value is not None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"value": _round(self.value)}
        if self.lo is not None or self.hi is not None:
            out["ci95"] = [_round(self.lo), _round(self.hi)]
        if self.how:
            out["how"] = self.how
        if self.note:
            out["note"] = self.note
        return out


def not_identifiable(why: str) -> Estimate:
    return Estimate(None, note=f"not identifiable from this run: {why}")


def exact(value: float, how: str) -> Estimate:
    """A number the run shows directly (a count, a configured size)."""
    return Estimate(value, value, value, how)


def rng_for(name: str) -> np.random.Generator:
    """The seeded Generator of one quantity: same trace, same intervals."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def bootstrap(values: np.ndarray, stat: Callable[[np.ndarray], float], name: str,
              rounds: int = BOOTSTRAP_ROUNDS) -> tuple[float, float]:
    """Percentile bootstrap 95 % interval of `stat` over resamples of `values`."""
    rng = rng_for(name)
    n = len(values)
    draws = np.array([stat(values[rng.integers(0, n, n)]) for _ in range(rounds)])
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return math.nan, math.nan
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson score 95 % interval of a proportion k / n (good at 0 and near it)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else
                                                          min(1.0, centre + half))


def poisson_rate(n: int, span: float) -> Estimate:
    """Events per second over `span` seconds with a normal-approximation 95 % interval."""
    rate = n / span
    half = Z95 * math.sqrt(max(n, 1)) / span
    return Estimate(rate, max(0.0, rate - half), rate + half, "Poisson, analytic")


def _round(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.4g}")
