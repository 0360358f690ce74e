"""Business traffic on a shared pool: its arrival rate, its schedule, its query time.

Every request the gateway let through asks the pool for a connection (the load test records
when); requests the gateway's open breaker refused or the generator dropped never do, so the
rate counts them from the run's report. Rate changes are found on the recorded asks as for a
batch (lab.fit.arrivals), unless the gateway's breaker opened: the requests it refused leave
holes in the asks that are not changes of the rate. The gateway's timeout and breaker are its
configuration, which the trace header carries: they are written as they were, not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.fit.arrivals import ArrivalFit, fit_arrivals
from lab.fit.data import RunData
from lab.fit.estimate import Estimate, poisson_rate
from lab.fit.service import DurationFit, fit_durations


@dataclass
class BusinessFit:
    pool: str
    rate: Estimate
    arrivals: ArrivalFit
    query: DurationFit | None
    gateway: dict[str, Any]

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pool": self.pool, "rate": float(f"{self.rate.value or 0:.4g}"),
                               "query": self.query.spec() if self.query else 0.0}
        if self.arrivals.kind == "schedule":
            out["schedule"] = [{"at_s": round(at, 3), "rate": float(f"{r.value or 0:.4g}")}
                               for at, r in self.arrivals.steps]
        return out | {k: v for k, v in self.gateway.items() if v is not None}

    def as_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "rate_per_s": self.rate.as_json(),
                "arrivals": self.arrivals.as_json(),
                "query": self.query.as_json() if self.query else None,
                "gateway": self.gateway}


def fit_business(run: RunData) -> BusinessFit | None:
    if not run.business_asks:
        return None
    pool = max(run.business_asks, key=lambda p: len(run.business_asks[p]))
    asks = run.business_asks[pool]
    biz = (run.report or {}).get("business") or {}
    dropped = ((run.report or {}).get("loadtest") or {}).get("business_dropped", 0)
    total = max(len(asks), int(biz.get("requests", 0)) + int(biz.get("rejected_by_breaker", 0))
                + int(dropped or 0))
    rate = poisson_rate(total, max(run.end_t, 1e-9))
    arrivals = fit_arrivals(asks, run.end_t)
    if biz.get("breaker_opens"):  # refused requests leave holes that are not rate changes
        arrivals = ArrivalFit(total, "poisson", 0.0, rate)
    return BusinessFit(pool, rate, arrivals,
                       fit_durations(run.business_queries.get(pool, asks[:0]),
                                     f"business:{pool}:query"),
                       dict(run.gateway or {}))
