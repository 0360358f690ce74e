"""The sampled timeline of a simulation, written into the trace (taskfuse.trace's series).

Rates (throughput, request rate) are over the last sample interval; business percentiles
are over the requests the gateway saw in the last interval. Everything else is a level or a
running total at the sample time. `loop_lag` (only when a kind is async) is the largest
wait of a coroutine for the event loop since the previous sample, in seconds: the same
series, with the same meaning, as a worker's trace.
"""

from __future__ import annotations

from typing import Any

from lab.simulate.sim import Simulation
from taskfuse.core.metrics import percentile
from taskfuse.core.states import TaskStatus
from taskfuse.trace import BREAKER_CODES, TraceWriter

DONE = (TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.CANCELED)
NAN = None  # written as null; readers see NaN


def series_names(sim: Simulation) -> list[str]:
    names = ["queue_depth", "running", "running_limit", "stuck", "submitted"]
    names += [f"done.{s.value}" for s in DONE]
    names += ["throughput", "success_rate", "alerts.firing"]
    if getattr(sim, "loop", None) is not None:  # async kinds: the event loop's lag
        names.append("loop_lag")
    for ds in sim.downstreams:
        names += [f"ds.{ds}.{k}" for k in ("in_flight", "limit", "rps", "r429", "errors",
                                           "breaker", "reopen_in", "tokens")]
    for pool in sim.pools:
        names += [f"pool.{pool}.{k}" for k in ("in_use", "waiting", "size")]
    if sim.business is not None:
        names += ["biz.p50", "biz.p99", "biz.slo_p99", "biz.timeouts", "biz.breaker"]
    for batch in sim.sc.batches:
        names += [f"batch.{batch.id}.{s.value}" for s in TaskStatus]
        names.append(f"batch.{batch.id}.p99")
    return names


def header(sim: Simulation, names: list[str]) -> dict[str, Any]:
    sc = sim.sc
    return {
        "source": "lab",
        "scenario": sc.name,
        "seed": sim.seed,
        "series": names,
        "sample_interval_s": sc.sample_interval_s,
        "meta": {
            "downstreams": list(sim.downstreams),
            "pools": list(sim.pools),
            "batches": [b.id for b in sc.batches],
            "workers": sc.workers,
            "slo": sc.slo.model_dump(exclude_none=True),
            "description": sc.description,
        },
    }


class TimelineRecorder:
    """Called by the simulation at every sample time; appends one row to the trace."""

    def __init__(self, sim: Simulation, writer: TraceWriter) -> None:
        self.writer = writer
        self.interval = sim.sc.sample_interval_s
        self._last_done = 0
        self._last_calls = dict.fromkeys(sim.downstreams, 0)
        self._biz_seen = 0

    def __call__(self, sim: Simulation) -> None:
        now = sim.now
        self.writer.sample(round(now, 6), self.row(sim, now))

    def row(self, sim: Simulation, now: float) -> list[Any]:
        m = sim.metrics
        counts = m.counts
        done = sum(counts[s.value] for s in DONE)
        throughput = (done - self._last_done) / self.interval
        self._last_done = done
        workers = sim.sc.workers
        stuck = sim.stats.stuck
        limit = (len(sim.workers) - len(sim.dead) - stuck) if isinstance(workers, int) else NAN
        row: list[Any] = [m.queue_depth, m.running, limit, stuck, sim.stats.submitted]
        row += [counts[s.value] for s in DONE]
        row += [throughput, _num(m.success_rate), len(sim.alerts.firing)]
        if getattr(sim, "loop", None) is not None:
            row.append(_num(m.loop_lag))
        for name, ds in sim.downstreams.items():
            row += self._downstream(name, ds, now)
        for pool in sim.pools.values():
            row += [pool.in_use, pool.waiting, pool.size]
        if sim.business is not None:
            row += self._business(sim, now)
        store = sim.scheduler.store
        for batch in sim.sc.batches:
            per = store.counts(batch.id)
            row += [per[s] for s in TaskStatus]
            recent = m.recent.get(batch.id)
            row.append(_num(percentile([d for _, d in recent], 99)) if recent else NAN)
        return row

    def _downstream(self, name: str, ds: Any, now: float) -> list[Any]:
        guard = ds.guard
        rps = (ds.calls - self._last_calls[name]) / self.interval
        self._last_calls[name] = ds.calls
        breaker = guard.breaker
        code, reopen = NAN, NAN
        if breaker is not None:
            code = BREAKER_CODES[breaker.state(now).value]
            at = breaker.reopen_at()
            reopen = max(0.0, at - now) if at is not None else NAN
        limit = guard.bulkhead.limit if guard.bulkhead is not None else NAN
        tokens = round(guard.bucket.tokens(now), 3) if guard.bucket is not None else NAN
        return [ds.in_flight, limit, rps, ds.r429, ds.errors + ds.timeouts, code, reopen, tokens]

    def _business(self, sim: Simulation, now: float) -> list[Any]:
        biz = sim.business
        assert biz is not None
        fresh = biz.latencies[self._biz_seen:]
        self._biz_seen = len(biz.latencies)
        slo = sim.sc.slo.business_p99_s
        code = BREAKER_CODES[biz.breaker.state(now).value] if biz.breaker is not None else NAN
        return [
            _num(percentile(fresh, 50)), _num(percentile(fresh, 99)),
            slo if slo is not None else NAN, biz.timeouts, code,
        ]


def _num(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
