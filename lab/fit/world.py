"""The whole fit of one recorded run: every estimator, and the world and limits they make.

`fit_run` calls the estimators (one module each) and keeps their answers; `world()` turns
them into the world keys of a scenario, `limits()` answers the limits the run used, read
from the trace header by `lab.fit.recorded_limits` (a load test and `taskfuse worker --trace` write
them there; other traces get the defaults, said so in `notes`). `lab.fit.writer` writes the
two as a scenario and the limits file it names (or as one scenario, limits inline).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from lab.fit.arrivals import ArrivalFit, fit_arrivals
from lab.fit.business import BusinessFit, fit_business
from lab.fit.data import RunData
from lab.fit.hangs import HangFit, fit_hangs, with_hang
from lab.fit.overhead import call_overheads, timer_overhead, without
from lab.fit.pools import PoolFit, fit_pools
from lab.fit.programs import ProgramFit, fit_programs
from lab.fit.provider import ProviderFit, fit_provider
from lab.fit.recorded_limits import RecordedLimits, recorded_limits
from lab.fit.writer import left_out


@dataclass
class RunFit:
    run: RunData
    providers: dict[str, ProviderFit]
    arrivals: dict[str, ArrivalFit]
    programs: dict[str, ProgramFit]
    pools: dict[str, PoolFit]
    business: BusinessFit | None
    recorded: RecordedLimits
    notes: list[str] = field(default_factory=list)
    hangs: dict[str, HangFit] = field(default_factory=dict)

    def batch_ids(self) -> list[str]:
        known = [b for b in self.run.meta.get("batches") or [] if b in self.arrivals]
        rest = sorted((b for b in self.arrivals if b not in known),
                      key=lambda b: float(self.run.submits[b][0]))
        return known + rest

    def world(self) -> dict[str, Any]:
        """The world as today's scenario keys (pools, providers, business, batches, slo)."""
        pools = {}
        for name, p in self.pools.items():
            size = p.size.value if p.size.value is not None else (p.max_in_use or 1)
            pools[name] = {"size": int(size)}
        batches = []
        for b in self.batch_ids():
            program = self.programs.get(b)
            steps = program.spec() if program and program.steps else [{"work": 0.0}]
            if b in self.hangs:
                steps = with_hang(steps, self.hangs[b])
            batches.append({"id": b, "count": self.arrivals[b].count,
                            "arrival": self.arrivals[b].spec(), "program": steps})
        return {
            "pools": pools,
            "downstreams": {n: {"provider": p.spec()} for n, p in self.providers.items()},
            "business": self.business.spec() if self.business else None,
            "batches": batches,
            "slo": dict(self.run.meta.get("slo") or {}),
        }

    def limits(self) -> RecordedLimits:
        """The limits the run used, as recorded in its header (or the defaults)."""
        return self.recorded

    def as_json(self) -> dict[str, Any]:
        return {
            "trace": str(self.run.path),
            "source": self.run.source,
            "time_scale": self.run.time_scale,
            "run_s": round(self.run.end_t, 3),
            "downstreams": {n: p.as_json() for n, p in self.providers.items()},
            "batches": {b: {"arrival": self.arrivals[b].as_json(),
                            "program": self.programs[b].as_json() if b in self.programs
                            else None,
                            **({"hang": self.hangs[b].as_json()} if b in self.hangs else {})}
                        for b in self.batch_ids()},
            "pools": {n: p.as_json() for n, p in self.pools.items()},
            "business": self.business.as_json() if self.business else None,
            "limits_recorded": self.recorded.recorded,
            "limits_file": self.recorded.file,
            "notes": self.notes,
        }


def fit_run(run: RunData) -> RunFit:
    """Every estimator over one run (see the package doc for what each needs)."""
    recorded = recorded_limits(run.meta, run.end_t)
    notes = list(recorded.notes)
    if not recorded.recorded:
        notes.append("the trace does not record the run's limits (a load test and a worker "
                     "traced by this version do): the fitted limits are the defaults and "
                     "the recorded worker count")
    if not run.calls and not run.db and not run.submits:
        notes.append("the trace has no calls, DB steps or submits: nothing to fit")
    if run.unsubmitted:
        notes.append(f"{run.unsubmitted} tasks ran without being submitted in this trace "
                     "(waiting when it started, or submitted by another process): taken as "
                     "submitted at its start")
    if run.source == "lab":
        notes.append("a simulation's trace: fitting it learns the simulator's world back")
    paced = {name for name, ds in (recorded.doc.get("downstreams") or {}).items()
             if (ds.get("client") or {}).get("rate_limit")}
    if run.report is None:
        notes.append("the run did not finish (no footer): the fit covers what was recorded")
    fit = RunFit(
        run=run,
        providers={name: _less_harness(fit_provider(name, calls), run)
                   for name, calls in run.calls.items()},
        arrivals={b: fit_arrivals(t, run.end_t) for b, t in run.submits.items() if len(t)},
        programs={b: _work_less_harness(p, run) for b, p in fit_programs(run, paced).items()},
        pools=fit_pools(run),
        business=fit_business(run),
        recorded=recorded,
        notes=notes,
        hangs=fit_hangs(run),
    )
    fit.notes += [f"left out of the fitted files: {line}"
                  for line in left_out(fit.world(), recorded)]
    return fit


def _less_harness(provider: ProviderFit, run: RunData) -> ProviderFit:
    """The provider with the load test's measured call overhead out of its service time."""
    overhead = call_overheads(run.report).get(provider.name)
    return replace(provider, service=without(provider.service, overhead))


def _work_less_harness(program: ProgramFit, run: RunData) -> ProgramFit:
    """The program with the load test's timer lateness out of its `work` steps."""
    late = timer_overhead(run.report)
    if late is None:
        return program
    steps = [replace(s, duration=without(s.duration, late)) if s.kind == "work" else s
             for s in program.steps]
    return replace(program, steps=steps)
