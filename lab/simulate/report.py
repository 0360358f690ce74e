"""The run report: the numbers a person deciding limits needs, as a dict and as text.

`build_report` is pure over a finished Simulation (no wall-clock value inside, so the same
file and seed give the same report byte for byte); the CLI adds `wall_s` to the JSON only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.simulate.sim import Simulation
from taskfuse.core.metrics import percentile
from taskfuse.core.states import TaskStatus

STATUSES = [s.value for s in TaskStatus]


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p99": None}
    return {
        "mean": _r(float(np.mean(values))),
        "p50": _r(percentile(values, 50)),
        "p99": _r(percentile(values, 99)),
    }


def build_report(sim: Simulation) -> dict[str, Any]:
    sc = sim.sc
    counts = sim.metrics.counts
    tasks = {s: counts[s] for s in ["SUCCESS", "FAILED", "TIMEOUT", "CANCELED", "PENDING",
                                    "RUNNING"]}
    tasks["submitted"] = sim.stats.submitted
    makespan = sim.ended_at if sim.ended_at is not None else sim.now
    ended = sum(tasks[s] for s in ("SUCCESS", "FAILED", "TIMEOUT", "CANCELED"))
    durations = [d for ds in sim.metrics.durations.values() for d in ds]
    retries = sum(r.retry_count for r in sim.task_records())
    report: dict[str, Any] = {
        "scenario": sc.name,
        "seed": sim.seed,
        "makespan_s": _r(makespan, 3),
        "sim_time_s": _r(sim.now, 3),
        "finished": sim.ended_at is not None,
        "events": sim.simpy_events,
        "events_per_task": _r(sim.simpy_events / max(1, sim.stats.submitted), 2),
        "tasks": tasks,
        "throughput_per_s": _r(ended / makespan if makespan else 0.0, 3),
        "attempts": sim.stats.attempts,
        "retries": retries,
        "deferred": sim.stats.deferred,
        "late_results_discarded": sim.stats.lost_races,
        "duplicates_submitted": sim.stats.duplicates,
        "workers_crashed": sim.stats.crashed_workers,
        "stuck_workers": _stuck(sim.stats, sim.now),
        "workers_killed": sim.stats.killed,
        "wait_s": _summary(sim.stats.first_waits),
        "run_s": _summary(durations),
        "downstreams": {name: _downstream(sim, name) for name in sim.downstreams},
        "pools": {name: _pool(p) for name, p in sim.pools.items()},
        "business": _business(sim),
        "alerts": [
            {"rule": rule, "fired_at_s": _r(fired, 3), "resolved_at_s": _r(resolved, 3)}
            for rule, fired, resolved in sim.alerts.history
        ],
    }
    if sim.loop is not None:  # only a scenario with async kinds has the section
        report["async"] = _async(sim)
    report["slo"] = check_slo(sim, report)
    return report


def _stuck(stats: Any, now: float) -> dict[str, Any]:
    """Workers busy with an attempt that was timed out (or canceled) but has not returned:
    at most at once, on average over the run, and how many were replaced or retired."""
    return {
        "peak": stats.stuck_peak,
        "mean": _r(stats.stuck_area / now if now else 0.0),
        "replaced": stats.replaced,
        "retired": stats.retired,
    }


def _async(sim: Simulation) -> dict[str, Any]:
    """The event loop of the async executor: coroutine slots, cancels, and its lag (a
    coroutine's wait for the loop while others' CPU held it; None without `cpu` steps)."""
    loop = sim.loop
    assert loop is not None
    lags = loop.lags
    return {
        "async_concurrency": loop.capacity,
        "kinds": dict(sorted(loop.caps.items())),
        "coroutines": loop.started,
        "peak_in_flight": loop.peak,
        "cancelled": loop.cancelled,
        "loop_busy_share": _r(loop.busy_s / sim.now if sim.now else 0.0),
        "loop_lag_s": {
            "p50": _r(percentile(lags, 50)) if lags else None,
            "p99": _r(percentile(lags, 99)) if lags else None,
            "max": _r(max(lags)) if lags else None,
        },
    }


def _downstream(sim: Simulation, name: str) -> dict[str, Any]:
    ds = sim.downstreams[name]
    spec = sim.sc.downstreams[name]
    provider = spec.provider
    latency = provider.capacity.service.mean if provider.capacity else provider.latency.mean
    thumb = None
    if provider.rate is not None:
        thumb = int(provider.rate * latency * spec.safety_factor)
    guard = ds.guard
    return {
        "calls": ds.calls,
        "ok": ds.ok,
        "rejected_429": ds.r429,
        "errors": ds.errors,
        "timeouts": ds.timeouts,
        "call_retries": ds.retries,
        "breaker_rejections": ds.rejected,
        "max_in_flight": ds.max_in_flight,
        "breaker_opens": guard.breaker.opens if guard.breaker is not None else 0,
        "peak_rps": ds.peak_rps,
        "peak_rps_100ms": ds.peak_rps_100ms,
        "latency_p99_s": _r(percentile(ds.latencies, 99)),
        "provider_abandoned": ds.provider.abandoned,
        "rule_of_thumb_limit": thumb,
        "configured_limit": guard.bulkhead.limit if guard.bulkhead is not None else None,
    }


def _pool(pool: Any) -> dict[str, Any]:
    waits = pool.waits
    return {
        "size": pool.size,
        "max_in_use": pool.bulkhead.max_in_use,
        "acquires": len(waits),
        "wait_mean_s": _r(float(np.mean(waits)) if waits else 0.0),
        "wait_p99_s": _r(percentile(waits, 99) if waits else 0.0),
        "timeouts": pool.timeouts,
    }


def _business(sim: Simulation) -> dict[str, Any] | None:
    biz = sim.business
    if biz is None:
        return None
    lat = biz.latencies
    slo = sim.sc.slo.business_p99_s
    p99 = percentile(lat, 99)
    return {
        "requests": biz.requests,
        "p50_s": _r(percentile(lat, 50)),
        "p99_s": _r(p99),
        "max_s": _r(max(lat) if lat else None),
        "timeouts": biz.timeouts,
        "errors": biz.errors,
        "rejected_by_breaker": biz.rejected,
        "breaker_opens": biz.breaker.opens if biz.breaker is not None else 0,
        "slo_p99_s": slo,
        "slo_ok": None if slo is None or p99 is None else p99 <= slo,
    }


def check_slo(sim: Simulation, report: dict[str, Any]) -> dict[str, Any]:
    """Which promises of the scenario's `slo` block the run broke."""
    slo = sim.sc.slo
    broken: list[str] = []
    biz = report["business"]
    if slo.business_p99_s is not None and biz is not None:
        p99 = biz["p99_s"]
        if p99 is None or p99 > slo.business_p99_s:
            broken.append(f"business p99 {p99}s > {slo.business_p99_s}s")
    if (slo.business_timeouts is not None and biz is not None
            and biz["timeouts"] > slo.business_timeouts):
        broken.append(f"business timeouts {biz['timeouts']} > {slo.business_timeouts}")
    if slo.makespan_s is not None and (
        not report["finished"] or report["makespan_s"] > slo.makespan_s
    ):
        broken.append(f"makespan {report['makespan_s']}s > {slo.makespan_s}s"
                          + ("" if report["finished"] else " (did not finish)"))
    if slo.success_rate is not None:
        t = report["tasks"]
        total = t["SUCCESS"] + t["FAILED"] + t["TIMEOUT"] + t["CANCELED"]
        rate = t["SUCCESS"] / total if total else 0.0
        if rate < slo.success_rate:
            broken.append(f"success rate {rate:.4f} < {slo.success_rate}")
    if slo.max_429 is not None:
        n429 = sum(d["rejected_429"] for d in report["downstreams"].values())
        if n429 > slo.max_429:
            broken.append(f"429 responses {n429} > {slo.max_429}")
    return {"ok": not broken, "violations": broken}


# -- text ----------------------------------------------------------------------------------


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3f}{unit}" if abs(x) < 100 else f"{x:.1f}{unit}"
    return f"{x}{unit}"


def render_text(report: dict[str, Any]) -> str:
    r = report
    t = r["tasks"]
    lines = [
        f"scenario {r['scenario']}  seed {r['seed']}",
        "",
        f"makespan        {_fmt(r['makespan_s'], ' s')}"
        + ("" if r["finished"] else "  (horizon reached before every task ended)"),
        f"throughput      {_fmt(r['throughput_per_s'], ' tasks/s')}",
        f"tasks           submitted {t['submitted']}  SUCCESS {t['SUCCESS']}  FAILED "
        f"{t['FAILED']}  TIMEOUT {t['TIMEOUT']}  CANCELED {t['CANCELED']}  PENDING "
        f"{t['PENDING']}  RUNNING {t['RUNNING']}",
        f"attempts        {r['attempts']}  (retries {r['retries']}, deferred by breaker "
        f"{r['deferred']}, late results discarded {r['late_results_discarded']})",
        f"stuck workers   peak {r['stuck_workers']['peak']}  mean "
        f"{_fmt(r['stuck_workers']['mean'])}  (replaced {r['stuck_workers']['replaced']}, "
        f"retired {r['stuck_workers']['retired']}; worker processes killed "
        f"{r['workers_killed']})",
        f"queue wait      mean {_fmt(r['wait_s']['mean'], ' s')}  p50 "
        f"{_fmt(r['wait_s']['p50'], ' s')}  p99 {_fmt(r['wait_s']['p99'], ' s')}",
        f"run time        mean {_fmt(r['run_s']['mean'], ' s')}  p50 "
        f"{_fmt(r['run_s']['p50'], ' s')}  p99 {_fmt(r['run_s']['p99'], ' s')}",
        f"simpy events    {r['events']}  ({r['events_per_task']} per task)",
    ]
    if "async" in r:
        a = r["async"]
        lag = a["loop_lag_s"]
        lines += [
            f"event loop      coroutines {a['coroutines']}  peak in flight "
            f"{a['peak_in_flight']} of {a['async_concurrency']}  cancelled {a['cancelled']}  "
            f"busy {_fmt(a['loop_busy_share'])}",
            f"loop lag        p50 {_fmt(lag['p50'], ' s')}  p99 {_fmt(lag['p99'], ' s')}  "
            f"max {_fmt(lag['max'], ' s')}",
        ]
    if r["downstreams"]:
        lines += ["", "downstream      calls      ok     429  errors timeouts  in-flight  "
                      "breaker  peak-rps (100ms)  limit (rule of thumb)"]
        for name, d in r["downstreams"].items():
            lines.append(
                f"{name:<14}{d['calls']:>7}{d['ok']:>8}{d['rejected_429']:>8}{d['errors']:>8}"
                f"{d['timeouts']:>9}{d['max_in_flight']:>11}{d['breaker_opens']:>8}x"
                f"{d['peak_rps']:>9} ({d['peak_rps_100ms']:>6})  "
                f"{_fmt(d['configured_limit'])} ({_fmt(d['rule_of_thumb_limit'])})"
            )
    if r["pools"]:
        lines += ["", "pool            size  max-in-use  acquires  wait-mean  wait-p99  timeouts"]
        for name, p in r["pools"].items():
            lines.append(
                f"{name:<14}{p['size']:>6}{p['max_in_use']:>12}{p['acquires']:>10}"
                f"{_fmt(p['wait_mean_s'], 's'):>11}{_fmt(p['wait_p99_s'], 's'):>10}"
                f"{p['timeouts']:>10}"
            )
    b = r["business"]
    if b is not None:
        verdict = {True: "ok", False: "BROKEN", None: "-"}[b["slo_ok"]]
        lines += [
            "",
            f"business        requests {b['requests']}  p50 {_fmt(b['p50_s'], ' s')}  p99 "
            f"{_fmt(b['p99_s'], ' s')}  max {_fmt(b['max_s'], ' s')}",
            f"                gateway timeouts {b['timeouts']}  errors {b['errors']}  refused "
            f"by open gateway breaker {b['rejected_by_breaker']}  (opened "
            f"{b['breaker_opens']}x)  SLO p99 <= {_fmt(b['slo_p99_s'], ' s')}: {verdict}",
        ]
    if r["alerts"]:
        lines += ["", "alerts"]
        lines += [f"  {a['rule']:<22} fired {_fmt(a['fired_at_s'], ' s')}  resolved "
                  f"{_fmt(a['resolved_at_s'], ' s')}" for a in r["alerts"]]
    slo = r["slo"]
    lines += ["", "SLO             " + ("all kept" if slo["ok"] else "BROKEN")]
    lines += [f"  - {v}" for v in slo["violations"]]
    return "\n".join(lines) + "\n"
