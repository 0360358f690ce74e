"""DB pools: their size, and how long connections were waited for and held.

The size is what the run shows: the pool's size series when the trace has one (the load test
samples it; a pool reports its own size), else the most connections in use at once, which
is the size only if someone waited (otherwise the pool may be larger: not identifiable).
Hold times are per use: the query for a step that gives its connection back, from grant
to the end of the task for one that keeps it, the query for a business request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.fit.data import RunData
from lab.fit.estimate import Estimate, exact, not_identifiable


@dataclass
class PoolFit:
    name: str
    size: Estimate
    max_in_use: int | None
    uses: int
    waited: int  # uses that waited at all (> 1 ms of real time)
    wait_p99_s: float | None
    hold_mean_s: float | None
    hold_p99_s: float | None

    def as_json(self) -> dict[str, Any]:
        return {"size": self.size.as_json(), "max_in_use": self.max_in_use, "uses": self.uses,
                "waited": self.waited, "wait_p99_s": _r(self.wait_p99_s),
                "hold_mean_s": _r(self.hold_mean_s), "hold_p99_s": _r(self.hold_p99_s)}


def fit_pools(run: RunData) -> dict[str, PoolFit]:
    names = set(run.meta.get("pools") or []) | {d.pool for d in run.db} | set(run.business_queries)
    ends = {(a.task, a.attempt): a.end for a in run.attempts}
    noise = 0.001 / run.time_scale
    out = {}
    for name in sorted(names):
        steps = [d for d in run.db if d.pool == name]
        holds = [(ends.get((d.task, d.attempt)) or d.asked + d.waited + d.query)
                 - d.asked - d.waited if d.kept else d.query for d in steps]
        holds += run.business_queries.get(name, np.zeros(0)).tolist()
        waits = [d.waited for d in steps]
        in_use = _series_max(run, f"pool.{name}.in_use")
        size = _size(run, name, in_use, sum(w > noise for w in waits))
        out[name] = PoolFit(name, size, in_use, len(holds), sum(w > noise for w in waits),
                            float(np.percentile(waits, 99)) if waits else None,
                            float(np.mean(holds)) if holds else None,
                            float(np.percentile(holds, 99)) if holds else None)
    return out


def _size(run: RunData, name: str, in_use: int | None, waited: int) -> Estimate:
    configured = _series_max(run, f"pool.{name}.size")
    if configured is not None:
        return exact(configured, "the pool's size series (reported by the pool)")
    if in_use is not None and waited:
        return exact(in_use, "most connections in use while tasks waited")
    return not_identifiable(f"nobody waited; the pool has at least {in_use or 0} connections")


def _series_max(run: RunData, name: str) -> int | None:
    if name not in run.trace.columns:
        return None
    values = run.trace.columns[name]
    values = values[np.isfinite(values)]
    return int(values.max()) if len(values) else None


def _r(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")
