"""Distributions: every duration or count the lab draws comes from one of these.

Their parameters are the limits format's bounded numbers (taskfuse.limits.schema: finite,
within stated bounds, strict): a value or mean is at most 30 days, a mean at least a
millionth of a second, a count at most 1e9.

Each spec is a strict pydantic model (for the scenario file) with a `sampler(rng)` that
returns a zero-argument callable: the hot path draws with a bound method of an injected
`random.Random`, about ten times cheaper than a numpy scalar draw.

Pick one by what you know about the quantity:

* constant — a fixed value (or write the plain number);
* uniform — anything between low and high, equally likely;
* exponential — memoryless gaps such as Poisson inter-arrival times (given the mean);
* lognormal — latencies and service times: positive and right-skewed. Given mean and
  coefficient of variation cv: sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2; e.g.
  mean 0.2 s, cv 0.5 gives sigma = 0.472, median 0.179 s, p99 about 0.54 s;
* empirical — measured data: a list of values drawn uniformly, or percentiles
  ({50: 0.18, 90: 0.3, 99: 0.9}) interpolated linearly between the given points;
* integers — a whole count between low and high inclusive (calls per task).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from taskfuse.limits.schema import Count, Mean, NonNeg, Offset

Sampler = Callable[[], float]


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def sampler(self, rng: random.Random) -> Sampler:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def mean(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def upper(self) -> float:
        """The largest value a draw can take (inf for an unbounded distribution)."""
        return math.inf


class Constant(_Dist):
    dist: Literal["constant"] = "constant"
    value: Offset

    def sampler(self, rng: random.Random) -> Sampler:
        value = self.value
        return lambda: value

    @property
    def mean(self) -> float:
        return self.value

    @property
    def upper(self) -> float:
        return self.value


class _Ordered(_Dist):
    """A distribution between `low` and `high`: one check that they are in order."""

    low: float
    high: float

    @model_validator(mode="after")
    def _order(self) -> _Ordered:
        if self.high < self.low:
            raise ValueError(f"high must be >= low (got low={self.low!r}, high={self.high!r})")
        return self


class Uniform(_Ordered):
    dist: Literal["uniform"]
    low: Offset
    high: Offset

    def sampler(self, rng: random.Random) -> Sampler:
        low, high, uniform = self.low, self.high, rng.uniform
        return lambda: uniform(low, high)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def upper(self) -> float:
        return float(self.high)


class Exponential(_Dist):
    dist: Literal["exponential"]
    mean_s: Mean = Field(alias="mean")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)

    def sampler(self, rng: random.Random) -> Sampler:
        rate, expo = 1.0 / self.mean_s, rng.expovariate
        return lambda: expo(rate)

    @property
    def mean(self) -> float:
        return self.mean_s


class Lognormal(_Dist):
    dist: Literal["lognormal"]
    mean_s: Mean = Field(alias="mean")
    cv: NonNeg

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)

    def sampler(self, rng: random.Random) -> Sampler:
        if self.cv == 0:
            value = self.mean_s
            return lambda: value
        sigma2 = math.log1p(self.cv * self.cv)
        mu, sigma = math.log(self.mean_s) - sigma2 / 2, math.sqrt(sigma2)
        draw = rng.lognormvariate
        return lambda: draw(mu, sigma)

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def upper(self) -> float:
        return self.mean_s if self.cv == 0 else math.inf


class Empirical(_Dist):
    dist: Literal["empirical"]
    values: list[Offset] | None = None
    percentiles: dict[float, Offset] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Empirical:
        if (self.values is None) == (self.percentiles is None):
            raise ValueError("give exactly one of values or percentiles")
        if self.values is not None and not self.values:
            raise ValueError("values must not be empty")
        if self.percentiles is not None:
            if len(self.percentiles) < 2:
                raise ValueError("percentiles needs at least two points")
            qs = sorted(self.percentiles)
            if qs[0] < 0 or qs[-1] > 100:
                raise ValueError(f"percentile keys must be within 0..100, got {qs}")
            xs = [self.percentiles[q] for q in qs]
            if any(b < a for a, b in itertools.pairwise(xs)):
                raise ValueError("percentile values must not decrease as the percentile grows")
        return self

    def _points(self) -> tuple[list[float], list[float]]:
        assert self.percentiles is not None
        qs = sorted(self.percentiles)
        return [q / 100 for q in qs], [self.percentiles[q] for q in qs]

    def sampler(self, rng: random.Random) -> Sampler:
        if self.values is not None:
            values, choice = list(self.values), rng.choice
            return lambda: choice(values)
        ps, xs = self._points()
        lo_p, hi_p = ps[0], ps[-1]
        uniform = rng.random

        def draw() -> float:
            u = lo_p + (hi_p - lo_p) * uniform()
            i = min(max(bisect.bisect_right(ps, u), 1), len(ps) - 1)
            p0, p1, x0, x1 = ps[i - 1], ps[i], xs[i - 1], xs[i]
            return x0 if p1 == p0 else x0 + (x1 - x0) * (u - p0) / (p1 - p0)

        return draw

    @property
    def mean(self) -> float:
        if self.values is not None:
            return sum(self.values) / len(self.values)
        ps, xs = self._points()
        area = sum((p1 - p0) * (x0 + x1) / 2 for (p0, p1), (x0, x1) in
                   zip(itertools.pairwise(ps), itertools.pairwise(xs), strict=True))
        return area / (ps[-1] - ps[0])

    @property
    def upper(self) -> float:
        return max(self.values if self.values is not None else self._points()[1])


class Integers(_Ordered):
    dist: Literal["integers"]
    low: Count
    high: Count

    def sampler(self, rng: random.Random) -> Sampler:
        low, high, randint = self.low, self.high, rng.randint
        return lambda: float(randint(low, high))

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def upper(self) -> float:
        return float(self.high)


DistSpec = Annotated[
    Constant | Uniform | Exponential | Lognormal | Empirical | Integers,
    Field(discriminator="dist"),
]


def as_dist(value: object) -> object:
    """Let a plain number stand for a constant distribution in scenario files."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    return value
