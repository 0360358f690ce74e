"""Run a scenario end to end: simulation, timeline, trace and report, as one call.

Scripts, tests, `lab simulate` and the sweep all come through `run_scenario`, so a trace and a
report always describe the same run. The trace is written in place as the run goes, so
`lab watch --follow` can show it live; its footer (the report) is written only when the run
completes, so a reader can always tell a finished trace from an interrupted one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.scenario import Scenario
from lab.simulate.report import build_report
from lab.simulate.sim import Simulation
from lab.simulate.timeline import TimelineRecorder, header, series_names
from taskfuse.core.events import Event, EventKind
from taskfuse.trace import TraceWriter, compact

_SUBMIT = EventKind.SUBMIT


@dataclass
class RunResult:
    report: dict[str, Any]
    wall_s: float
    simulation: Simulation
    trace: Path | None


def _trace_sink(writer: TraceWriter) -> Any:
    """Events go to the trace in its compact form (`taskfuse.trace.compact`)."""
    append = writer.event

    def sink(e: Event) -> None:
        append(compact(e))

    return sink


class _Progress:
    """A one-line progress bar on stderr: simulated time against the horizon."""

    def __init__(self) -> None:
        self.last = -1

    def __call__(self, now: float, horizon: float) -> None:
        pct = int(100 * min(1.0, now / horizon))
        if pct != self.last:
            self.last = pct
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\r[{bar:<25}] {pct:3d}%  t={now:,.0f}s of {horizon:,.0f}s")
            sys.stderr.flush()

    def done(self) -> None:
        if self.last >= 0:
            sys.stderr.write("\r" + " " * 60 + "\r")


class Pacer:
    """Holds a simulation back to `speed` simulated seconds per wall second, flushing the
    trace at every sample so a follower (`lab simulate --watch`) sees the run as it goes.
    Setting `stop` ends the run at the next sample."""

    def __init__(self, writer: TraceWriter, speed: float) -> None:
        self.writer = writer
        self.speed = speed
        self.stop = threading.Event()
        self.started = time.monotonic()

    def __call__(self, now: float) -> None:
        self.writer.flush()
        if self.stop.is_set():
            raise Stopped
        ahead = now / self.speed - (time.monotonic() - self.started)
        if ahead > 0:
            self.stop.wait(ahead)


class Stopped(Exception):
    """A paced run was stopped by its viewer."""


def run_scenario(
    scenario: Scenario, seed: int | None = None, trace: Path | None = None,
    progress: bool = False, pace: float | None = None,
    on_start: Callable[[Pacer], None] | None = None,
) -> RunResult:
    """Simulate `scenario`, optionally writing a trace; returns the report and the run.

    With `pace`, the run is held to that many simulated seconds per wall second (a trace is
    required); `on_start` receives the Pacer, whose `stop` ends the run early.
    """
    writer: TraceWriter | None = None
    sim = Simulation(scenario, seed)
    bar = _Progress() if progress else None
    sim.on_progress = bar
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        writer = TraceWriter(trace, header(sim, series_names(sim)), flush_every=5_000)
        sim.record_history(_trace_sink(writer))
        recorder = TimelineRecorder(sim, writer)
        if pace is not None:
            pacer = Pacer(writer, pace)
            if on_start is not None:
                on_start(pacer)

            def paced(s: Simulation) -> None:
                recorder(s)
                pacer(s.now)

            sim.on_sample = paced
        else:
            sim.on_sample = recorder
    try:
        sim.run()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        if bar is not None:
            bar.done()
    report = build_report(sim)
    if writer is not None:
        writer.close(report)
    return RunResult(report, sim.wall_s, sim, trace)
