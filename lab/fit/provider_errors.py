"""A provider's own errors: each kind's share of the requests it answered.

Only answered requests count: a 429 (the rate limit decides before anything is drawn), an
outage answer (its window, not the error mix) and a client timeout (its answer, if any, was
never seen) are left out of both numerator and denominator. Each rate carries a Wilson 95 %
interval, which stays meaningful for rare kinds (3 errors in 2,000 calls) and for none at
all (0 of 2,000: below 0.19 %).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.fit.data import HTTP_429, OK, TIMEOUT, Calls
from lab.fit.estimate import Estimate, wilson


@dataclass
class ErrorFit:
    rates: dict[str, Estimate]
    answered: int
    none_seen: Estimate  # the upper bound on any error rate when no error was seen

    def spec(self) -> dict[str, float]:
        return {kind: float(f"{e.value:.3g}") for kind, e in self.rates.items()
                if e.value is not None and e.value > 0}

    def as_json(self) -> dict[str, object]:
        return {"answered": self.answered,
                "rates": {k: e.as_json() for k, e in self.rates.items()},
                **({"no_errors": self.none_seen.as_json()} if not self.rates else {})}


def fit_errors(calls: Calls, usable: np.ndarray) -> ErrorFit:
    """Error kinds and rates over the `usable` calls (outside outage windows)."""
    outcome = calls.outcome[usable]
    answered = outcome[(outcome != HTTP_429) & (outcome != TIMEOUT)]
    n = len(answered)
    rates = {}
    for kind in sorted(set(answered.tolist()) - {OK}):
        k = int(np.sum(answered == kind))
        rates[kind] = Estimate(k / n, *wilson(k, n), f"{k} of {n}, Wilson")
    lo, hi = wilson(0, n)
    return ErrorFit(rates, n, Estimate(0.0, lo, hi, f"0 of {n}, Wilson"))
