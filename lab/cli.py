"""`lab`: size concurrency limits in virtual time before a batch job takes production down.

    lab simulate FILE [--seed N] [--set key.path=value ...] [--json]
                      [--trace PATH | --no-trace]
                      [--plot FILE.png]
    lab sweep FILE --vary key.path=LIST|FROM..TO:STEP ... [--seeds N] [--jobs J]
                   [--metric PATH ...] [--out PREFIX] [--plot FILE.png]
    lab size FILE --vary ... [--slo 'PATH<=NUMBER' ...] (--maximize M | --minimize M)
                  [--write-limits FILE] [--threads-or-async KIND]
    lab plot TRACE -o FILE.png [--vs OTHER_TRACE]
    lab loadtest FILE [--time-scale F] [--store URL] [--json] [--trace PATH | --no-trace]
    lab compare FILE [--time-scale F] [--tolerance X]
    lab compare --real RUN.trace FILE   the simulation against a recorded run, no new run
    lab fit RUN.trace [--out FILE.yaml [--limits-out FILE | --inline-limits]]
                                   the world learnt from a recorded run, as a scenario
                                   naming a limits file of the limits the run used
    lab schema                     the scenario format as JSON Schema
    lab watch TRACE [--follow]     the terminal monitor on a recorded or running trace
    lab watch --store URL          the whole fleet live, read from its store

Exit codes: 0 ok; 1 an SLO declared in the scenario was broken (for `lab size`: no point of
the space keeps every SLO); 2 bad input (one line on stderr saying what, where and what was
expected; a traceback only with -v); 130 interrupted by Ctrl-C, however the command was
started (a sweep keeps what finished); 141 the reader of stdout went away (`| head`).
"""

from __future__ import annotations

import argparse
import sys

from lab.fit import cli as fit_cli
from lab.loadtest import cli as loadtest_cli
from lab.plot import cli as plot_cli
from lab.scenario import ScenarioError, json_schema
from lab.simulate import cli as simulate_cli
from lab.sizing import cli as sizing_cli
from taskfuse.cliguard import EXIT_INTERRUPTED, OneLineParser, interruptible, run_printing
from taskfuse.version import version_line


def build_parser() -> argparse.ArgumentParser:
    """The top parser: each job adds its own subcommands (their handlers beside them, in
    lab/JOB/cli.py); `schema` and `watch` belong to no one job and stay here. The order of
    the calls is the order of `lab --help`."""
    parser = OneLineParser(
        prog="lab", description="Simulate batch jobs against a modelled world to size limits."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")
    parser.add_argument("--version", action="version", version=version_line("lab"))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    simulate_cli.add_parser(sub)
    sizing_cli.add_parsers(sub)
    plot_cli.add_parser(sub)
    loadtest_cli.add_parsers(sub)
    fit_cli.add_parser(sub)
    schema = sub.add_parser("schema", help="print the scenario format as JSON Schema")
    schema.set_defaults(handler=schema_cmd)
    schema.add_argument("--limits", action="store_true",
                        help="the limits file's format instead (also read by taskfuse worker)")

    watch_parser = sub.add_parser("watch", help="open the terminal monitor on a trace or a store")
    watch_parser.set_defaults(handler=watch)
    source = watch_parser.add_mutually_exclusive_group(required=True)
    source.add_argument("trace", nargs="?", default=None,
                        help="a trace file written by lab simulate or a real run")
    source.add_argument("--store", metavar="URL", default=None,
                        help="watch the whole fleet live from its store: sqlite:///PATH or "
                             "postgresql://...")
    watch_parser.add_argument("--follow", action="store_true",
                              help="follow a trace being written")
    watch_parser.add_argument("--speed", type=float, default=1.0, help="replay speed factor")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one line (or the help)
        return int(exc.code or 0)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Ctrl-C stops any command, however it was started; a load test stops on SIGTERM too
        with interruptible(sigterm=args.command in ("loadtest", "compare")):
            return run_printing(lambda: args.handler(args))
    except ScenarioError as exc:
        if args.verbose:
            raise
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def schema_cmd(args: argparse.Namespace) -> int:
    """`lab schema [--limits]`: the file formats, as JSON Schema."""
    print(json_schema(limits=args.limits))
    return 0


def watch(args: argparse.Namespace) -> int:
    try:
        from tui.app import run_watch
    except ImportError as exc:  # pragma: no cover - the monitor ships with the package
        print(f"lab: the terminal monitor is not available: {exc}", file=sys.stderr)
        return 2
    if args.store is not None:
        if args.follow or args.speed != 1.0:
            print("lab: --follow and --speed apply to a trace, not to --store",
                  file=sys.stderr)
            return 2
        from tui.app import run_fleet

        return run_fleet(args.store)
    from taskfuse.trace import TraceError, check_trace

    try:  # the whole file, before the monitor starts: damage anywhere is one line, exit 2
        check_trace(args.trace, follow=args.follow)
    except TraceError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    return run_watch(args.trace, follow=args.follow, speed=args.speed)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
