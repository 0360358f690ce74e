"""A recorded run in, its fitted world out: the entry points of `lab fit` (see
lab/fit/__init__.py for what each module estimates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.fit.data import load_run
from lab.fit.world import RunFit, fit_run
from lab.fit.writer import left_out, scenario_text, split_texts
from lab.scenario import ScenarioError

__all__ = ["RunFit", "fit_trace", "fitted_files", "fitted_scenario"]


def fit_trace(path: str | Path) -> RunFit:
    """Fit every estimator to the trace at `path` (taskfuse.trace.TraceError if unreadable)."""
    return fit_run(load_run(path))


def fitted_scenario(fit: RunFit) -> str:
    """The fitted world under the run's limits inline, as one scenario file's text."""
    _needs_tasks(fit)
    return scenario_text(fit.world(), fit.limits(), comments=_comments(fit, None),
                         **_named(fit))


def fitted_files(fit: RunFit, limits_ref: str) -> tuple[str, str]:
    """The fitted world as a scenario naming the limits file `limits_ref` (relative to the
    scenario), and that file's text: the limits the run used, deployable as they are."""
    _needs_tasks(fit)
    rec = fit.limits()
    run = fit.run
    if rec.recorded:
        said = [f"The limits {run.path.name} ran with ({run.source}), as its trace header "
                "records them, every value written out."]
    else:
        said = [f"{run.path.name} ({run.source}) does not record its limits: these are the "
                "defaults", "and the run's worker count, not necessarily what it ran with."]
    if rec.file:
        said.append(f"The run was started with the limits file {rec.file}.")
    said.append("Written by `lab fit` for the fitted world that names it; deploy it with "
                "`taskfuse worker --limits FILE`.")
    said += [f"Left out: {line}" for line in left_out(fit.world(), rec)]
    return split_texts(fit.world(), rec, limits_ref=limits_ref,
                       comments=_comments(fit, limits_ref), limits_comments=said,
                       **_named(fit))


def _needs_tasks(fit: RunFit) -> None:
    """A scenario needs a batch, and a batch is fitted from tasks: a run without any is the
    user's input, said in one line (ScenarioError), not a scenario that fails to parse."""
    if not fit.batch_ids():
        raise ScenarioError(f"{fit.run.path}: the run has no task (no task was submitted or "
                            "moved), so there is no batch to write a scenario of; the "
                            "report without --out still shows what the run holds")


def _named(fit: RunFit) -> dict[str, Any]:
    run = fit.run
    name = f"{run.header.get('scenario') or 'run'}-fitted"
    seed = run.header.get("seed")
    return {"name": name, "seed": int(seed or 0), "description": f"fitted from {run.path.name}"}


def _comments(fit: RunFit, limits_ref: str | None) -> list[str]:
    run, rec = fit.run, fit.limits()
    where = f"the limits (in {limits_ref})" if limits_ref else "the limits"
    comments = [f"Fitted by `lab fit` from {run.path.name} ({run.source}, {run.end_t:.1f} s "
                "recorded).",
                f"The world (providers, pools, business, batches) is estimated; {where} are",
                "the ones the run used. `lab fit` prints how well the run supports each number."]
    if rec.file:
        comments.append(f"The run was started with the limits file {rec.file}.")
    return comments + [f"note: {n}" for n in fit.notes]
