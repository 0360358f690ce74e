"""The fit as a person reads it: for every fitted number, how well the run supports it.

One table per downstream, batch, pool and the business traffic: quantity, estimate, 95 %
interval, and how it was found (method, sample size, goodness of fit) or why the run cannot
tell ("not identifiable from this run: ..."). Rendered with rich, without colour, so the
text is the same on a terminal and in a file.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.fit.estimate import Estimate
from lab.fit.hangs import HangFit
from lab.fit.programs import StepFit, count_spec
from lab.fit.service import DurationFit
from lab.fit.world import RunFit

WIDTH = 118


def render(fit: RunFit) -> str:
    """The whole report as text."""
    buf = io.StringIO()
    console = Console(file=buf, width=WIDTH, color_system=None, force_terminal=False)
    run, rec = fit.run, fit.recorded
    limits = "from the trace header" if rec.recorded else "not recorded"
    if rec.file:
        limits += f", the run's limits file {rec.file}"
    console.print(f"fit of {run.path}  (source {run.source}, time scale {run.time_scale:g}, "
                  f"{run.end_t:.1f} s recorded; limits {limits})")
    for name, p in fit.providers.items():
        rows = _durations("service" if p.capacity.servers.value is not None else "latency",
                          p.service)
        rl = p.rate_limit
        agree = ("" if rl.replayed_429 is None else
                 f"; its replay answers {rl.replayed_429} 429s")
        rows += [("rate limit (/s)", rl.rate, f"{rl.rejected} 429s in {rl.requests} "
                                              f"requests{agree}"),
                 ("burst", rl.burst, ""),
                 ("servers", p.capacity.servers,
                  f"most in flight {p.capacity.max_in_flight}")]
        rows += [(f"errors {k}", e, "") for k, e in p.errors.rates.items()] or [
            ("errors", p.errors.none_seen, "none seen")]
        rows += [("outage", None, f"{w.start_s:.3f}..{w.end_s:.3f} s (edges within "
                                  f"{w.edge_s:.3g} s), {w.mode} {w.error}, {w.calls} calls")
                 for w in p.outages]
        rows += [("slowdown factor", Estimate(w.factor, *w.factor_ci, "ratio of medians, "
                                              "bootstrap"),
                  f"{w.start_s:.3f}..{w.end_s:.3f} s (edges within {w.edge_s:.3g} s), "
                  f"{w.calls} calls") for w in p.slowdowns]
        console.print(_table(f"downstream {name}: {p.calls} calls", rows))
    for batch in fit.batch_ids():
        console.print(_table(f"batch {batch}", _batch_rows(fit, batch)))
    for name, pool in fit.pools.items():
        rows = [("size", pool.size, f"most in use {pool.max_in_use}"),
                ("uses", None, f"{pool.uses}, {pool.waited} waited; wait p99 "
                               f"{_s(pool.wait_p99_s)}; hold mean {_s(pool.hold_mean_s)}, "
                               f"p99 {_s(pool.hold_p99_s)}")]
        console.print(_table(f"pool {name}", rows))
    if fit.business is not None:
        b = fit.business
        rows = [("rate (/s)", b.rate, f"{b.arrivals.kind}; pool {b.pool}")]
        rows += _durations("query", b.query)
        rows += [("gateway", None, ", ".join(f"{k} {v}" for k, v in b.gateway.items()
                                             if v is not None) + " (as configured)")]
        console.print(_table("business", rows))
    for note in fit.notes:
        console.print(f"note: {note}")
    return buf.getvalue()


Row = tuple[str, Estimate | None, str]


def _table(title: str, rows: list[Row]) -> Table:
    table = Table(title=title, title_justify="left", box=None, padding=(0, 2, 0, 0))
    for col in ("quantity", "estimate", "95 % interval", "support"):
        table.add_column(col, overflow="fold")
    for quantity, est, support in rows:
        if est is None:
            table.add_row(quantity, "", "", support)
        elif est.value is None:
            table.add_row(quantity, "-", "", est.note)
        else:
            table.add_row(quantity, _num(est.value), _interval(est),
                          "; ".join(x for x in (est.how, support) if x))
    return table


def _durations(label: str, d: DurationFit | None) -> list[Row]:
    if d is None:
        return [(label, None, "no samples")]
    pct = d.percentiles
    fits = ", ".join(f"{k} KS {v:.3f}" for k, v in d.ks_by_family.items())
    support = (f"written: {d.family}; {fits or 'constant'}; n {d.n}"
               + (f" + {d.censored} censored" if d.censored else "")
               + f"; p50 {_s(pct.get(50))}, p99 {_s(pct.get(99))}")
    rows: list[Row] = [(f"{label} mean (s)", d.mean, support)]
    if d.family in ("lognormal", "empirical"):
        rows.append((f"{label} cv", d.cv, ""))
    return rows


def _batch_rows(fit: RunFit, batch: str) -> list[Row]:
    arrival = fit.arrivals[batch]
    text = f"{arrival.count} tasks, {arrival.kind}"
    if arrival.kind == "closed":
        text += f" at {arrival.start_s:.3f} s"
    elif arrival.ks is not None:
        text += f", KS of gaps vs exponential {arrival.ks:.3f}"
    rows: list[Row] = [("arrival rate (/s)" if arrival.rate else "arrival", arrival.rate, text)]
    rows += [(f"  from {at:.3f} s", r, "") for at, r in arrival.steps]
    program = fit.programs.get(batch)
    if program is None:
        return [*rows, ("program", None, "no successful attempt")]
    rows.append(("program", None, f"from {program.used} of {program.attempts} successful "
                                  "attempts that follow the commonest order"))
    for i, step in enumerate(program.steps):
        rows += _step_rows(i + 1, step)
    if batch in fit.hangs:
        rows += _hang_rows(fit.hangs[batch])
    return rows


def _hang_rows(h: HangFit) -> list[Row]:
    how = ("its thread stayed stuck (the stuck series)" if h.executor == "thread" else
           "its process was killed (workers killed)")
    rows: list[Row] = [("hang probability", h.probability,
                        f"timed out and {how}; after {h.after} call runs / DB steps"),
                       ("hang executor", None, f"{h.executor}, as the run shows it")]
    if h.duration is not None:
        rows += _durations("hang duration", h.duration)
        rows.append(("hang returns", None, f"{h.mean.how} (the least spread: cv a lower "
                                           "bound)"))
    else:
        rows.append(("hang duration mean (s)", h.mean, f"written {h.duration_spec()}"))
    return rows


def _step_rows(i: int, step: StepFit) -> list[Row]:
    if step.kind == "call":
        return [(f"{i}. call {step.name}: count", step.count_mean(), f"{count_spec(step.counts)}")]
    label = f"{i}. {step.kind}" + (f" {step.name}" if step.name else "")
    rows = _durations(label, step.duration)
    if step.kind == "db":
        hold = "whole_task" if step.kept_share > 0.5 else "query_only"
        rows.append((f"{i}. hold", None, f"{hold} (kept in {step.kept_share:.0%})"))
    return rows


def _num(x: float) -> str:
    return f"{x:.4g}"


def _interval(e: Estimate) -> str:
    if e.lo is None and e.hi is None:
        return ""
    return f"[{_num(e.lo) if e.lo is not None else '?'}, {_num(e.hi) if e.hi is not None else '?'}]"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g} s"


def as_json(fit: RunFit, scenario: str | None, limits: str | None = None) -> dict[str, Any]:
    """The fit, and the files written: the scenario and its limits file (None: not written,
    or the limits are inline)."""
    return {**fit.as_json(), "scenario": scenario, "limits": limits}
