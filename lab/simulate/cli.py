"""`lab simulate`: its parser and its handler (the report, the trace, --plot, --watch)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from lab.cliargs import SEED, add_progress, progress_wanted
from lab.scenario import ScenarioError, load_scenario, task_bound
from taskfuse.cliguard import number_arg


def _speed(text: str) -> float:
    """`simulate --watch --speed`: bounded by the monitor's own speed ladder, the one bound
    `lab watch --speed` has (imported here, when the flag is given: the monitor is not
    loaded by every lab command)."""
    from tui.trace_model import SPEEDS as LADDER

    return number_arg(float, LADDER[0], LADDER[-1])(text)


def add_parser(sub: Any) -> None:
    """`lab simulate FILE ...`, handled by `simulate`."""
    sim = sub.add_parser("simulate", help="run a scenario in virtual time and print a report")
    sim.set_defaults(handler=simulate)
    sim.add_argument("file", help="scenario YAML file")
    sim.add_argument("--seed", type=SEED, default=None, help="override the scenario's seed")
    sim.add_argument("--max-tasks", type=number_arg(int, 0, 10**9), default=400_000,
                     metavar="N", help="the most tasks the run may create by its horizon "
                                       "(400,000; 0: no bound; about 1 KB of memory each)")
    sim.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="KEY.PATH=VALUE", help="override a value (repeatable)")
    sim.add_argument("--json", action="store_true", help="print the report as one JSON object")
    sim.add_argument("--limits", metavar="FILE", default=None,
                     help="run the scenario's world with this limits file's limits")
    out = sim.add_mutually_exclusive_group()
    out.add_argument("--trace", metavar="PATH",
                     help="where to write the trace (default: traces/NAME-seedN.trace)")
    out.add_argument("--no-trace", action="store_true", help="do not write a trace")
    add_progress(sim)
    sim.add_argument("--plot", metavar="FILE.png", help="draw the run at the end (see lab plot)")
    sim.add_argument("--watch", action="store_true",
                     help="run paced in front of you in the terminal monitor")
    sim.add_argument("--speed", type=_speed, default=10.0, metavar="F",
                     help="with --watch: simulated seconds per wall second, 0.25 to 1000 [10]")


def _trace_path(args: argparse.Namespace, name: str, seed: int) -> Path | None:
    if args.no_trace:
        return None
    if args.trace:
        return Path(args.trace)
    return Path("traces") / f"{name}-seed{seed}.trace"


def simulate(args: argparse.Namespace) -> int:
    from lab.simulate.run import run_scenario  # imported late: `lab schema` stays instant

    if args.plot:
        from lab.plot.charts import require_matplotlib

        require_matplotlib()
    with task_bound(args.max_tasks or None):
        scenario = load_scenario(args.file, args.overrides, args.limits)
    seed = scenario.seed if args.seed is None else args.seed
    trace = _trace_path(args, scenario.name, seed)
    if args.watch:
        return simulate_watched(scenario, seed, trace, args.speed)
    progress = progress_wanted(args)
    # --plot with --no-trace: the picture needs a trace, so it goes to a scratch file
    scratch: Any = (tempfile.TemporaryDirectory(prefix="lab-plot-") if args.plot and not trace
                    else contextlib.nullcontext(None))
    with scratch as tmp:
        drawn = Path(tmp) / "run.trace" if tmp is not None else trace
        try:
            result = run_scenario(scenario, seed, drawn, progress=progress)
        except OSError as exc:
            raise ScenarioError(f"{drawn}: cannot write the trace: {exc.strerror}") from None
        if args.plot and drawn is not None:
            from lab.plot.charts import plot_traces

            print(f"picture {plot_traces([drawn], args.plot)}", file=sys.stderr)
    report: dict[str, Any] = result.report
    if args.json:
        print(json.dumps({**report, "wall_s": round(result.wall_s, 3)}, indent=2))
    else:
        from lab.simulate.report import render_text

        sys.stdout.write(render_text(report))
        where = f"  trace {trace}" if trace else ""
        print(f"wall {result.wall_s:.2f} s  ({report['events'] / max(result.wall_s, 1e-9):,.0f}"
              f" simpy events/s){where}", file=sys.stderr)
    return 0 if report["slo"]["ok"] else 1


def simulate_watched(scenario: Any, seed: int, trace: Path | None, speed: float) -> int:
    """Run the simulation paced in a thread while the monitor follows its trace; quitting
    the monitor stops the run. Prints the report when the run got to its end."""
    import threading

    from lab.simulate.report import render_text
    from lab.simulate.run import Pacer, Stopped, run_scenario
    from tui.app import run_watch
    from tui.trace_model import check_speed

    try:  # the monitor's own bound, as `lab watch --speed` has it: nan, 0, -5, 1e9 refused
        check_speed(speed)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    scratch = tempfile.TemporaryDirectory(prefix="lab-watch-") if trace is None else None
    path = trace if trace is not None else Path(scratch.name) / "run.trace"  # type: ignore[union-attr]
    started = threading.Event()
    pacers: list[Pacer] = []
    outcome: dict[str, Any] = {}

    def on_start(pacer: Pacer) -> None:
        pacers.append(pacer)
        started.set()

    def run() -> None:
        try:
            outcome["result"] = run_scenario(scenario, seed, path, pace=speed, on_start=on_start)
        except Stopped:
            outcome["stopped"] = True
        finally:
            started.set()

    worker = threading.Thread(target=run, name="lab-simulation", daemon=True)
    worker.start()
    started.wait()
    code = run_watch(str(path), follow=True)
    for pacer in pacers:
        pacer.stop.set()
    worker.join()
    if scratch is not None:
        scratch.cleanup()
    if "result" not in outcome:
        print("lab: the run was stopped before its end", file=sys.stderr)
        return code or 130
    report = outcome["result"].report
    sys.stdout.write(render_text(report))
    return code or (0 if report["slo"]["ok"] else 1)
