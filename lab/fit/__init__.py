"""`lab fit`: learn a scenario's world from a recorded run, so the lab predicts that run.

A trace written by `lab loadtest` (or by `taskfuse worker --trace`) holds every downstream call
(start, end, outcome), every move of every task, DB steps and business requests (load test),
and the limits the run used (load test). From those, one module per job estimates:

    data.py        the trace as flat columns (calls, DB steps, submits, attempts)
    windows.py     outages and slowdowns: change points in error share and latency
    capacity.py    servers, from latency against calls in flight
    service.py     durations: percentiles, lognormal / exponential with a KS figure
    ratelimit.py   the provider's token bucket, from when 429s start
    errors.py      error kinds and their rates
    provider.py    the above, in the order they need each other, per downstream
    arrivals.py    closed / Poisson / scheduled arrivals per batch
    programs.py    each batch's task program: DB steps, calls per task, local work
    pools.py       pool sizes, waits and hold times
    business.py    business traffic: rate, schedule, query time
    world.py       all of it for one run, as world keys plus the recorded limits
    writer.py      the one place a fitted scenario file is written
    report.py      the text report: every number with its interval or why it is unknown

Each number carries a 95 % interval or says it is not identifiable from this run (a rate limit
never reached, a capacity never exceeded), see estimate.py.
"""

from __future__ import annotations

from pathlib import Path

from lab.fit.data import load_run
from lab.fit.world import RunFit, fit_run
from lab.fit.writer import scenario_text

__all__ = ["RunFit", "fit_trace", "fitted_scenario"]


def fit_trace(path: str | Path) -> RunFit:
    """Fit every estimator to the trace at `path` (taskfuse.trace.TraceError if unreadable)."""
    return fit_run(load_run(path))


def fitted_scenario(fit: RunFit) -> str:
    """The fitted world under the run's limits, as a scenario file's text."""
    run = fit.run
    name = f"{run.header.get('scenario') or 'run'}-fitted"
    comments = [f"Fitted by `lab fit` from {run.path.name} ({run.source}, {run.end_t:.1f} s "
                "recorded).",
                "The world (providers, pools, business, batches) is estimated; the limits are",
                "the ones the run used. `lab fit` prints how well the run supports each number."]
    comments += [f"note: {n}" for n in fit.notes]
    seed = run.header.get("seed")
    return scenario_text(fit.world(), fit.limits(), name=name, seed=int(seed or 0),
                         description=f"fitted from {run.path.name}", comments=comments)
