"""`lab`: size concurrency limits in virtual time before a batch job takes production down.

    lab simulate FILE [--seed N] [--set key.path=value ...] [--json]
                      [--trace PATH | --no-trace]
    lab schema                     the scenario format as JSON Schema
    lab watch TRACE [--follow]     the terminal monitor on a recorded or running trace

Exit codes: 0 ok; 1 an SLO declared in the scenario was broken; 2 bad input (one line on
stderr saying what, where and what was expected; a traceback only with -v).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lab.scenario import ScenarioError, json_schema, load_scenario


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab", description="Simulate batch jobs against a modelled world to size limits."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="run a scenario in virtual time and print a report")
    sim.add_argument("file", help="scenario YAML file")
    sim.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    sim.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="KEY.PATH=VALUE", help="override a value (repeatable)")
    sim.add_argument("--json", action="store_true", help="print the report as one JSON object")
    out = sim.add_mutually_exclusive_group()
    out.add_argument("--trace", metavar="PATH",
                     help="where to write the trace (default: traces/NAME-seedN.trace)")
    out.add_argument("--no-trace", action="store_true", help="do not write a trace")
    sim.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                     help="progress bar on stderr (auto: when stderr is a terminal)")

    sub.add_parser("schema", help="print the scenario format as JSON Schema")

    watch = sub.add_parser("watch", help="open the terminal monitor on a trace")
    watch.add_argument("trace", help="a trace file written by lab simulate or a real run")
    watch.add_argument("--follow", action="store_true", help="follow a trace being written")
    watch.add_argument("--speed", type=float, default=1.0, help="replay speed factor")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "simulate":
            return simulate(args)
        if args.command == "schema":
            print(json_schema())
            return 0
        return watch(args)
    except ScenarioError as exc:
        if args.verbose:
            raise
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130


def _trace_path(args: argparse.Namespace, name: str, seed: int) -> Path | None:
    if args.no_trace:
        return None
    if args.trace:
        return Path(args.trace)
    return Path("traces") / f"{name}-seed{seed}.trace"


def simulate(args: argparse.Namespace) -> int:
    from lab.run import run_scenario  # imported late: `lab schema` stays instant

    scenario = load_scenario(args.file, args.overrides)
    seed = scenario.seed if args.seed is None else args.seed
    trace = _trace_path(args, scenario.name, seed)
    progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    try:
        result = run_scenario(scenario, seed, trace, progress=progress)
    except OSError as exc:
        raise ScenarioError(f"{trace}: cannot write the trace: {exc.strerror}") from None
    report: dict[str, Any] = result.report
    if args.json:
        print(json.dumps({**report, "wall_s": round(result.wall_s, 3)}, indent=2))
    else:
        from lab.report import render_text

        sys.stdout.write(render_text(report))
        where = f"  trace {trace}" if trace else ""
        print(f"wall {result.wall_s:.2f} s  ({report['events'] / max(result.wall_s, 1e-9):,.0f}"
              f" simpy events/s){where}", file=sys.stderr)
    return 0 if report["slo"]["ok"] else 1


def watch(args: argparse.Namespace) -> int:
    try:
        from tui.app import run_watch
    except ImportError as exc:  # pragma: no cover - the monitor ships with the package
        print(f"lab: the terminal monitor is not available: {exc}", file=sys.stderr)
        return 2
    return run_watch(args.trace, follow=args.follow, speed=args.speed)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
