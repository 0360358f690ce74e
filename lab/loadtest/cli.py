"""`lab loadtest` and `lab compare`: their parsers and handlers (a real run, and a real run
held to its simulation)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lab.cliargs import SEED, add_progress, progress_wanted
from lab.scenario import ScenarioError, load_scenario
from taskfuse.cliguard import number_arg
from taskfuse.limits.schema import MAX_NUMBER

#: A load test's time scale: a thousand times faster to a thousand times slower (beyond,
#: every duration of a scenario falls below a millisecond or above its 30-day bound).
TIME_SCALES = (0.001, 1000.0)


def add_parsers(sub: Any) -> None:
    """`lab loadtest` and `lab compare`: the scenario run for real, and held to its simulation."""
    for name, text in (("loadtest", "run a scenario for real: HTTP servers, real pools, "
                                    "the threaded runtime"),
                       ("compare", "run a scenario simulated and for real, metric by metric")):
        p = sub.add_parser(name, help=text)
        p.set_defaults(handler=loadtest_cmd if name == "loadtest" else compare_cmd)
        p.add_argument("file", help="scenario YAML file")
        p.add_argument("--time-scale", type=number_arg(float, *TIME_SCALES), default=1.0,
                       metavar="F",
                       help="multiply every duration, rate interval and window by F "
                            "(0.1: ten times faster); reports convert back [1]")
        p.add_argument("--store", metavar="URL", default=None,
                       help="task store and DB pools: sqlite:///PATH or postgresql://... "
                            "(default: tasks in memory, pools on a temporary SQLite file)")
        p.add_argument("--seed", type=SEED, default=None, help="override the scenario's seed")
        p.add_argument("--limits", metavar="FILE", default=None,
                       help="run the scenario's world with this limits file's limits")
        p.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY.PATH=VALUE", help="override a value (repeatable)")
        p.add_argument("--json", action="store_true", help="print the result as one JSON object")
        add_progress(p)
        if name == "loadtest":
            out = p.add_mutually_exclusive_group()
            out.add_argument("--trace", metavar="PATH",
                             help="where to write the trace (default: traces/NAME-loadtest.trace)")
            out.add_argument("--no-trace", action="store_true", help="do not write a trace")
        else:
            p.add_argument("--tolerance", type=number_arg(float, 0, MAX_NUMBER), default=0.25,
                           metavar="X",
                           help="flag relative differences beyond X (0.25 = 25%%) [0.25]")
            p.add_argument("--real", metavar="RUN.trace", default=None,
                           help="compare with this recorded run instead of running one")


def _loadtest_setup(args: argparse.Namespace) -> Any:
    """The scenario of a load test and its checked options (SIGTERM is handled like Ctrl-C,
    see main, so a stopped load test still stops its servers and threads)."""
    if args.store is not None and not args.store.startswith(("sqlite:", "postgres", "memory:")):
        raise ScenarioError(f"--store {args.store!r}: expected sqlite:///PATH, "
                            "postgresql://... or memory://")
    return load_scenario(args.file, args.overrides, args.limits)


def _run_loadtest(args: argparse.Namespace, scenario: Any, trace: Path | None) -> Any:
    from lab.loadtest.pools import PoolError
    from lab.loadtest.runner import run_loadtest
    from lab.loadtest.servers import ServerError
    from taskfuse.core.states import TaskfuseError

    try:
        return run_loadtest(scenario, time_scale=args.time_scale, store_url=args.store,
                            trace=trace, seed=args.seed, progress=progress_wanted(args),
                            announce=lambda line: print(f"lab: {line}", file=sys.stderr))
    except (ServerError, TaskfuseError, PoolError) as exc:
        raise ScenarioError(str(exc)) from None
    except OSError as exc:
        raise ScenarioError(f"load test: {exc.strerror or exc}") from None


def loadtest_cmd(args: argparse.Namespace) -> int:
    scenario = _loadtest_setup(args)
    trace = None
    if not args.no_trace:
        default = Path("traces") / f"{scenario.name}-loadtest.trace"
        trace = Path(args.trace) if args.trace else default
    result = _run_loadtest(args, scenario, trace)
    report: dict[str, Any] = result.report
    if args.json:
        print(json.dumps({**report, "wall_s": round(result.wall_s, 3)}, indent=2))
    else:
        from lab.simulate.report import render_text

        extra = report["loadtest"]
        text = render_text(report)  # a real run has no simpy events: drop that line
        sys.stdout.write("".join(line for line in text.splitlines(keepends=True)
                                 if not line.startswith("simpy events")))
        print(f"\nload test       time scale {extra['time_scale']:g} (times above in scenario "
              f"seconds)  workers {extra['workers']}  store {extra['store']}  pools "
              f"{extra['pools'] or '-'}  business dropped {extra['business_dropped']}")
        for note in extra["unsupported"]:
            print(f"  not reproduced: {note}")
        for note in extra["warnings"]:
            print(f"  warning: {note}")
        where = f"  trace {trace}" if trace else ""
        print(f"wall {result.wall_s:.2f} s{where}", file=sys.stderr)
    return 0 if report["slo"]["ok"] else 1


def compare_cmd(args: argparse.Namespace) -> int:
    from lab.loadtest.compare import compare_reports, render_comparison, rows_as_json
    from lab.simulate.run import run_scenario

    scenario = _loadtest_setup(args)
    if args.real is not None:
        return compare_real_cmd(args, scenario)
    simulated = run_scenario(scenario, args.seed)
    real = _run_loadtest(args, scenario, None)
    rows = compare_reports(simulated.report, real.report, args.tolerance, args.time_scale)
    if args.json:
        print(json.dumps({"scenario": scenario.name, "time_scale": args.time_scale,
                          "tolerance": args.tolerance, "metrics": rows_as_json(rows),
                          "simulated": simulated.report, "real": real.report}, indent=2))
    else:
        sys.stdout.write(render_comparison(rows, scenario.name, args.tolerance,
                                           args.time_scale, (simulated.wall_s, real.wall_s)))
        extra = real.report["loadtest"]
        for note in extra["unsupported"]:
            print(f"not reproduced: {note}")
        for note in extra["warnings"]:
            print(f"warning: {note}")
    return 1 if any(r.flagged for r in rows) else 0


def compare_real_cmd(args: argparse.Namespace, scenario: Any) -> int:
    """`lab compare --real RUN.trace FILE`: the simulation against a run already recorded."""
    from lab.loadtest.compare import compare_with_trace, render_comparison, rows_as_json

    rows, simulated, real, scale = compare_with_trace(scenario, Path(args.real),
                                                      args.tolerance, args.seed)
    if args.json:
        print(json.dumps({"scenario": scenario.name, "real_trace": args.real,
                          "time_scale": scale, "tolerance": args.tolerance,
                          "metrics": rows_as_json(rows), "simulated": simulated.report,
                          "real": real}, indent=2))
    else:
        sys.stdout.write(render_comparison(rows, scenario.name, args.tolerance, scale,
                                           (simulated.wall_s, 0.0), real_source=args.real))
    return 1 if any(r.flagged for r in rows) else 0
