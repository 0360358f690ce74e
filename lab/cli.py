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
import contextlib
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from lab.scenario import ScenarioError, json_schema, load_scenario
from taskfuse.cliguard import (
    EXIT_INTERRUPTED,
    OneLineParser,
    interruptible,
    number_arg,
    run_printing,
)
from taskfuse.core import bounds
from taskfuse.limits.schema import MAX_NUMBER
from taskfuse.version import version_line

# The lab's flags are bounded like every number (taskfuse.core.bounds): finite, within these.
#: A seed, as the scenario's `seed` takes it.
SEED = number_arg(int, 0, bounds.MAX_INT64)


def _speed(text: str) -> float:
    """`simulate --watch --speed`: bounded by the monitor's own speed ladder, the one bound
    `lab watch --speed` has (imported here, when the flag is given: the monitor is not
    loaded by every lab command)."""
    from tui.model import SPEEDS as LADDER

    return number_arg(float, LADDER[0], LADDER[-1])(text)


#: Seeds per point, parallel runs and a search's runs: far above any real sweep.
MAX_SEEDS, MAX_JOBS, MAX_BUDGET = 10_000, 1_024, 1_000_000
#: A load test's time scale: a thousand times faster to a thousand times slower (beyond,
#: every duration of a scenario falls below a millisecond or above its 30-day bound).
TIME_SCALES = (0.001, 1000.0)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="lab", description="Simulate batch jobs against a modelled world to size limits."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")
    parser.add_argument("--version", action="version", version=version_line("lab"))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    sim = sub.add_parser("simulate", help="run a scenario in virtual time and print a report")
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
    sim.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                     help="progress bar on stderr (auto: when stderr is a terminal)")
    sim.add_argument("--plot", metavar="FILE.png", help="draw the run at the end (see lab plot)")
    sim.add_argument("--watch", action="store_true",
                     help="run paced in front of you in the terminal monitor")
    sim.add_argument("--speed", type=_speed, default=10.0, metavar="F",
                     help="with --watch: simulated seconds per wall second, 0.25 to 1000 [10]")

    _sweep_parser(sub)
    _size_parser(sub)
    plot = sub.add_parser("plot", help="draw a recorded run as a picture for a review")
    plot.add_argument("trace", help="a trace file written by lab simulate or a real run")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png",
                      help="where to write the picture (.png, .svg or .pdf)")
    plot.add_argument("--vs", metavar="OTHER_TRACE", help="a second run, drawn below the first")

    _loadtest_parsers(sub)
    _fit_parser(sub)
    schema = sub.add_parser("schema", help="print the scenario format as JSON Schema")
    schema.add_argument("--limits", action="store_true",
                        help="the limits file's format instead (also read by taskfuse worker)")

    watch = sub.add_parser("watch", help="open the terminal monitor on a trace or a store")
    source = watch.add_mutually_exclusive_group(required=True)
    source.add_argument("trace", nargs="?", default=None,
                        help="a trace file written by lab simulate or a real run")
    source.add_argument("--store", metavar="URL", default=None,
                        help="watch the whole fleet live from its store: sqlite:///PATH or "
                             "postgresql://...")
    watch.add_argument("--follow", action="store_true", help="follow a trace being written")
    watch.add_argument("--speed", type=float, default=1.0, help="replay speed factor")
    return parser


def _grid_args(p: argparse.ArgumentParser, seeds: int) -> None:
    """The options `lab sweep` and `lab size` share: the space, the seeds, where runs go."""
    p.add_argument("file", help="scenario YAML file")
    p.add_argument("--vary", action="append", default=[], required=True,
                   metavar="KEY.PATH=VALUES",
                   help="a varied key: a list 10,20,50 or a range 5..50:5 (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY.PATH=VALUE", help="a fixed override (repeatable)")
    p.add_argument("--limits", metavar="FILE", default=None,
                   help="run the scenario's world with this limits file's limits")
    p.add_argument("--seed", type=SEED, default=None, help="first seed (default: the file's)")
    p.add_argument("--seeds", type=number_arg(int, 1, MAX_SEEDS), default=seeds,
                   help=f"seeds per point: seed, seed+1, ... (default {seeds})")
    p.add_argument("--jobs", type=number_arg(int, 1, MAX_JOBS), default=os.cpu_count() or 1,
                   help="parallel runs (default: CPU count; 1 runs in this process)")
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="local processes, or a Dask distributed cluster")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="Dask scheduler address (default: a local cluster of --jobs workers)")
    p.add_argument("--metric", action="append", default=[], metavar="PATH",
                   help="a report key path to show, e.g. downstreams.partner.rejected_429")
    p.add_argument("--out", metavar="PREFIX",
                   help="write PREFIX.json and PREFIX.csv; rerunning resumes from them")
    p.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")


def _sweep_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a grid of values and seeds")
    _grid_args(p, seeds=1)
    p.add_argument("--plot", metavar="FILE.png", help="a line chart (1 axis) or heatmap (2)")


def _size_parser(sub: Any) -> None:
    p = sub.add_parser("size", help="search the limits that keep the SLOs and do best")
    _grid_args(p, seeds=3)
    p.add_argument("--slo", action="append", default=[], metavar="EXPR",
                   help="a constraint PATH OP NUMBER, e.g. 'business.p99_s<=0.06' (repeatable)")
    goal = p.add_mutually_exclusive_group(required=True)
    goal.add_argument("--maximize", metavar="METRIC", help="e.g. throughput_per_s")
    goal.add_argument("--minimize", metavar="METRIC", help="e.g. makespan_s")
    p.add_argument("--budget", type=number_arg(int, 1, MAX_BUDGET), default=400,
                   help="at most this many runs; a larger space is searched, not gridded")
    p.add_argument("--no-file-slo", action="store_true",
                   help="ignore the scenario's own slo block (only --slo constraints)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    p.add_argument("--write-limits", metavar="FILE", default=None,
                   help="write the recommended limits to FILE (for taskfuse worker --limits); "
                        "nothing is written when no point keeps the constraints")
    p.add_argument("--threads-or-async", metavar="KIND", default=None,
                   help="size KIND on worker threads (--vary workers=...) and as coroutines "
                        "(--vary async_concurrency=...) and answer which keeps the SLOs")


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
            return run_printing(lambda: _run(args))
    except ScenarioError as exc:
        if args.verbose:
            raise
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    if args.command == "simulate":
        return simulate(args)
    if args.command == "sweep":
        return sweep_cmd(args)
    if args.command == "size":
        return size_cmd(args)
    if args.command == "plot":
        return plot_cmd(args)
    if args.command == "loadtest":
        return loadtest_cmd(args)
    if args.command == "compare":
        return compare_cmd(args)
    if args.command == "fit":
        return fit_cmd(args)
    if args.command == "schema":
        print(json_schema(limits=args.limits))
        return 0
    return watch(args)


def _trace_path(args: argparse.Namespace, name: str, seed: int) -> Path | None:
    if args.no_trace:
        return None
    if args.trace:
        return Path(args.trace)
    return Path("traces") / f"{name}-seed{seed}.trace"


def simulate(args: argparse.Namespace) -> int:
    from lab.run import run_scenario  # imported late: `lab schema` stays instant

    if args.plot:
        from lab.plot import require_matplotlib

        require_matplotlib()
    from lab.scenario import task_bound

    with task_bound(args.max_tasks or None):
        scenario = load_scenario(args.file, args.overrides, args.limits)
    seed = scenario.seed if args.seed is None else args.seed
    trace = _trace_path(args, scenario.name, seed)
    if args.watch:
        return simulate_watched(scenario, seed, trace, args.speed)
    progress = _progress(args)
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
            from lab.plot import plot_traces

            print(f"picture {plot_traces([drawn], args.plot)}", file=sys.stderr)
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


def simulate_watched(scenario: Any, seed: int, trace: Path | None, speed: float) -> int:
    """Run the simulation paced in a thread while the monitor follows its trace; quitting
    the monitor stops the run. Prints the report when the run got to its end."""
    import threading

    from lab.report import render_text
    from lab.run import Pacer, Stopped, run_scenario
    from tui.app import run_watch
    from tui.model import check_speed

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


def _progress(args: argparse.Namespace) -> bool:
    return args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())


def _interrupted(store: Any, runs: int) -> int:
    """Ctrl-C during a sweep or search: say what was kept and how to go on."""
    if store.prefix is not None:
        print(f"lab: interrupted after {runs} new runs; {len(store.runs)} runs are in "
              f"{store.json_path} and {store.csv_path}: rerun the same command to resume",
              file=sys.stderr)
    else:
        print(f"lab: interrupted after {runs} runs (give --out PREFIX to keep runs and "
              "resume)", file=sys.stderr)
    return 130


def _space(args: argparse.Namespace) -> tuple[Any, dict[str, Any], list[str], Any]:
    """Plan, a report of the scenario's shape, the --metric paths checked against it, and
    the run store (resuming from --out); all checked before any executor starts."""
    from lab.metrics_expr import check_metric
    from lab.sweep import Plan, RunStore, default_metrics, report_skeleton

    plan = Plan.from_file(args.file, args.overrides, args.vary, args.seeds, args.seed,
                          args.limits)
    skeleton = report_skeleton(plan.scenario)
    metrics = [check_metric(skeleton, m) for m in args.metric]
    store = RunStore(plan, metrics or default_metrics(skeleton), args.out)
    return plan, skeleton, metrics, store


def _evaluator(args: argparse.Namespace, plan: Any, store: Any) -> Any:
    """Started last: a Dask executor brings up a cluster at once."""
    from lab.executors import make_executor
    from lab.sweep import Evaluator

    jobs = min(args.jobs, max(1, plan.size() * len(plan.seeds)))
    executor = make_executor(args.executor, jobs, args.scheduler)
    return Evaluator(plan, store, executor, progress=_progress(args))


def sweep_cmd(args: argparse.Namespace) -> int:
    from lab.sweep import render_table, run_sweep

    if args.plot:
        from lab.plot import require_matplotlib

        require_matplotlib()
    plan, _, _, store = _space(args)
    metrics = store.metrics
    evaluator = _evaluator(args, plan, store)
    try:
        rows = run_sweep(plan, evaluator, metrics)
    except KeyboardInterrupt:
        return _interrupted(store, evaluator.ran)
    finally:
        evaluator.executor.close()
    sys.stdout.write(render_table(plan, rows, metrics))
    if args.out:
        print(f"runs in {store.json_path} and {store.csv_path}", file=sys.stderr)
    if args.plot:
        from lab.plot import plot_sweep

        n = len(plan.seeds)
        title = f"{plan.scenario.name}: mean over {n} seed{'s' if n > 1 else ''} per point"
        print(f"picture {plot_sweep(plan.keys, rows, metrics, args.plot, title)}",
              file=sys.stderr)
    return 0


def size_cmd(args: argparse.Namespace) -> int:
    from lab import size
    from lab.metrics_expr import check_metric, parse_constraint

    target = Path(args.write_limits) if args.write_limits else None
    if target is not None and not target.parent.is_dir():  # before a long search, not after
        raise ScenarioError(f"--write-limits {target}: the directory "
                            f"{str(target.parent)!r} does not exist")
    constraints = [parse_constraint(text) for text in args.slo]
    if args.threads_or_async is not None:
        return _threads_or_async(args, constraints, target)
    plan, skeleton, extra, store = _space(args)
    for c in constraints:
        check_metric(skeleton, c.path, "--slo")
    goal = size.objective(args.maximize, args.minimize)
    check_metric(skeleton, goal.path, "--maximize" if args.maximize else "--minimize")
    constraints.append(size.FINISHED)
    if not args.no_file_slo and plan.scenario.slo.model_dump(exclude_none=True):
        constraints.append(size.FILE_SLO)
    evaluator = _evaluator(args, plan, store)
    try:
        result = size.Search(plan, evaluator, constraints, goal, args.budget).run()
    except KeyboardInterrupt:
        return _interrupted(store, evaluator.ran)
    finally:
        evaluator.executor.close()
    written = _write_limits(result, target, args.argv) if result.best.feasible else None
    if args.json:
        answer = size.as_json(result, extra)
        answer["limits_file"] = str(written) if written is not None else None
        print(json.dumps(answer, indent=2))
    else:
        sys.stdout.write(size.render(result, extra))
    if target is not None:
        print(f"limits written to {written} (deploy: taskfuse worker --limits {written} ...)"
              if written is not None else f"no limits written to {target}: no point keeps "
              "every constraint", file=sys.stderr)
    return 0 if result.best.feasible else 1


def _threads_or_async(args: argparse.Namespace, constraints: list[Any],
                      target: Path | None) -> int:
    """`lab size --threads-or-async KIND`: one search per executor (lab/choice.py)."""
    from lab import choice, size
    from lab.executors import make_executor
    from lab.metrics_expr import check_metric
    from lab.sweep import Evaluator, RunStore, default_metrics, report_skeleton

    plans = choice.plans(args.file, args.threads_or_async, args.overrides, args.vary,
                         args.seeds, args.seed, args.limits)
    goal = size.objective(args.maximize, args.minimize)
    results = {}
    extra: list[str] = []
    for executor, plan in plans.items():
        skeleton = report_skeleton(plan.scenario)
        extra = [check_metric(skeleton, m) for m in args.metric]
        for c in constraints:
            check_metric(skeleton, c.path, "--slo")
        check_metric(skeleton, goal.path, "--maximize" if args.maximize else "--minimize")
        checks = [*constraints, size.FINISHED]
        if not args.no_file_slo and plan.scenario.slo.model_dump(exclude_none=True):
            checks.append(size.FILE_SLO)
        out = f"{args.out}-{executor}" if args.out else None
        store = RunStore(plan, extra or default_metrics(skeleton), out)
        jobs = min(args.jobs, max(1, plan.size() * len(plan.seeds)))
        evaluator = Evaluator(plan, store, make_executor(args.executor, jobs, args.scheduler),
                              progress=_progress(args))
        try:
            results[executor] = size.Search(plan, evaluator, checks, goal, args.budget).run()
        except KeyboardInterrupt:
            return _interrupted(store, evaluator.ran)
        finally:
            evaluator.executor.close()
    answer = choice.choose(args.threads_or_async, results)
    written = None
    if answer.answer is not None:
        written = _write_limits(results[answer.answer], target, args.argv)
    if args.json:
        data = choice.as_json(answer, extra)
        data["limits_file"] = str(written) if written is not None else None
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(choice.render(answer, extra))
    if target is not None and written is None:
        print(f"no limits written to {target}: neither executor keeps every constraint",
              file=sys.stderr)
    return 0 if answer.answer is not None else 1


def _write_limits(result: Any, target: Path | None, argv: list[str]) -> Path | None:
    """The recommended limits, written whole (or not at all) under their provenance."""
    if target is None:
        return None
    from lab import size
    from taskfuse.limits.files import write_limits

    command = shlex.join(["lab", *argv])
    write_limits(size.recommended_limits(result), target, size.limits_header(result, command))
    return target


def plot_cmd(args: argparse.Namespace) -> int:
    from lab.plot import check_output, plot_traces, require_matplotlib

    require_matplotlib()
    check_output(args.output)  # before reading any trace: a bad -o is one line, exit 2
    paths = [args.trace, *([args.vs] if args.vs else [])]
    print(f"picture {plot_traces(paths, args.output)}", file=sys.stderr)
    return 0


def _loadtest_parsers(sub: Any) -> None:
    """`lab loadtest` and `lab compare`: the scenario run for real, and held to its simulation."""
    for name, text in (("loadtest", "run a scenario for real: HTTP servers, real pools, "
                                    "the threaded runtime"),
                       ("compare", "run a scenario simulated and for real, metric by metric")):
        p = sub.add_parser(name, help=text)
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
        p.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                       help="progress bar on stderr (auto: when stderr is a terminal)")
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
                            trace=trace, seed=args.seed, progress=_progress(args),
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
        from lab.report import render_text

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
    from lab.run import run_scenario

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


def _fit_parser(sub: Any) -> None:
    p = sub.add_parser("fit", help="learn the world from a recorded run and write a scenario")
    p.add_argument("trace", help="a trace of a real run (lab loadtest, taskfuse worker --trace)")
    p.add_argument("--out", metavar="FILE.yaml", default=None,
                   help="write the fitted scenario here: the world, naming a limits file "
                        "beside it that holds the limits the run used")
    p.add_argument("--limits-out", metavar="FILE", default=None,
                   help="the limits file to write (default: FILE.limits.yaml beside --out); "
                        "deployable with `taskfuse worker --limits FILE`")
    p.add_argument("--inline-limits", action="store_true",
                   help="write the limits inside the scenario instead, as one file")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")


def fit_cmd(args: argparse.Namespace) -> int:
    from lab.fit import fit_trace, fitted_files, fitted_scenario
    from lab.fit.report import as_json, render
    from lab.fit.writer import write_text
    from taskfuse.trace import TraceError

    out = Path(args.out) if args.out is not None else None
    limits_out = _fit_limits_out(args, out)
    try:
        fit = fit_trace(args.trace)
    except TraceError as exc:
        raise ScenarioError(str(exc)) from None
    writes: list[tuple[Path, str, str]] = []
    if limits_out is not None:
        base = out.parent if out is not None else limits_out.parent
        ref = os.path.relpath(limits_out.resolve(), base.resolve())
        text, limits_text = fitted_files(fit, Path(ref).as_posix())
        writes.append((limits_out, limits_text, "limits file"))
    elif out is not None:
        text = fitted_scenario(fit)
    if out is not None:
        writes.append((out, text, "scenario"))
    for path, content, what in writes:  # the limits first: the scenario names them
        try:
            write_text(path, content)
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot write the {what}: "
                                f"{exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(as_json(fit, args.out, str(limits_out) if limits_out else None),
                         indent=2))
    else:
        sys.stdout.write(render(fit))
        if out is None and limits_out is None:
            print("(give --out FILE.yaml to write the fitted scenario and its limits file)")
        for path, _, what in writes:
            print(f"{what} written to {path}")
    return 0


def _fit_limits_out(args: argparse.Namespace, out: Path | None) -> Path | None:
    """Where `lab fit` writes the limits file: --limits-out, else beside --out (None when
    the limits go inline, or nothing is written)."""
    if args.inline_limits:
        if args.limits_out is not None:
            raise ScenarioError("lab fit: --inline-limits and --limits-out exclude each other")
        if out is None:
            raise ScenarioError("lab fit: --inline-limits needs --out FILE.yaml")
        return None
    if args.limits_out is not None:
        limits_out = Path(args.limits_out)
    elif out is not None:
        stem = out.name[:-len(out.suffix)] if out.suffix else out.name
        limits_out = out.with_name(f"{stem}.limits{out.suffix or '.yaml'}")
    else:
        return None
    if out is not None and limits_out.resolve() == out.resolve():
        raise ScenarioError(f"lab fit: --limits-out {limits_out} is the scenario's own file")
    return limits_out


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
