"""`lab sweep` and `lab size`: their parsers and handlers (the space, the runs, the answer)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.cliargs import SEED, add_progress, progress_wanted
from lab.scenario import ScenarioError
from taskfuse.cliguard import number_arg

#: Seeds per point, parallel runs and a search's runs: far above any real sweep.
MAX_SEEDS, MAX_JOBS, MAX_BUDGET = 10_000, 1_024, 1_000_000


def add_parsers(sub: Any) -> None:
    """`lab sweep` then `lab size` (in this order in `lab --help`)."""
    _sweep_parser(sub)
    _size_parser(sub)


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
    add_progress(p)


def _sweep_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a grid of values and seeds")
    p.set_defaults(handler=sweep_cmd)
    _grid_args(p, seeds=1)
    p.add_argument("--plot", metavar="FILE.png", help="a line chart (1 axis) or heatmap (2)")


def _size_parser(sub: Any) -> None:
    p = sub.add_parser("size", help="search the limits that keep the SLOs and do best")
    p.set_defaults(handler=size_cmd)
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
    from lab.sizing.metrics_expr import check_metric
    from lab.sizing.sweep import Plan, RunStore, default_metrics, report_skeleton

    plan = Plan.from_file(args.file, args.overrides, args.vary, args.seeds, args.seed,
                          args.limits)
    skeleton = report_skeleton(plan.scenario)
    metrics = [check_metric(skeleton, m) for m in args.metric]
    store = RunStore(plan, metrics or default_metrics(skeleton), args.out)
    return plan, skeleton, metrics, store


def _evaluator(args: argparse.Namespace, plan: Any, store: Any) -> Any:
    """Started last: a Dask executor brings up a cluster at once."""
    from lab.sizing.executors import make_executor
    from lab.sizing.sweep import Evaluator

    jobs = min(args.jobs, max(1, plan.size() * len(plan.seeds)))
    executor = make_executor(args.executor, jobs, args.scheduler)
    return Evaluator(plan, store, executor, progress=progress_wanted(args))


def sweep_cmd(args: argparse.Namespace) -> int:
    from lab.sizing.sweep import render_table, run_sweep

    if args.plot:
        from lab.plot.charts import require_matplotlib

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
        from lab.plot.charts import plot_sweep

        n = len(plan.seeds)
        title = f"{plan.scenario.name}: mean over {n} seed{'s' if n > 1 else ''} per point"
        print(f"picture {plot_sweep(plan.keys, rows, metrics, args.plot, title)}",
              file=sys.stderr)
    return 0


def size_cmd(args: argparse.Namespace) -> int:
    from lab.sizing import size
    from lab.sizing.metrics_expr import check_metric, parse_constraint

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
    _print_answer(args, lambda: size.as_json(result, extra), lambda: size.render(result, extra),
                  written)
    if target is not None:
        print(f"limits written to {written} (deploy: taskfuse worker --limits {written} ...)"
              if written is not None else f"no limits written to {target}: no point keeps "
              "every constraint", file=sys.stderr)
    return 0 if result.best.feasible else 1


def _print_answer(args: argparse.Namespace, as_json: Callable[[], dict[str, Any]],
                  as_text: Callable[[], str], written: Path | None) -> None:
    """An answer of `lab size` on stdout, as JSON (with the limits file it wrote) or text."""
    if args.json:
        data = as_json()
        data["limits_file"] = str(written) if written is not None else None
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(as_text())


def _threads_or_async(args: argparse.Namespace, constraints: list[Any],
                      target: Path | None) -> int:
    """`lab size --threads-or-async KIND`: one search per executor (lab/sizing/choice.py)."""
    from lab.sizing import choice, size
    from lab.sizing.executors import make_executor
    from lab.sizing.metrics_expr import check_metric
    from lab.sizing.sweep import Evaluator, RunStore, default_metrics, report_skeleton

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
                              progress=progress_wanted(args))
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
    _print_answer(args, lambda: choice.as_json(answer, extra),
                  lambda: choice.render(answer, extra), written)
    if target is not None and written is None:
        print(f"no limits written to {target}: neither executor keeps every constraint",
              file=sys.stderr)
    return 0 if answer.answer is not None else 1


def _write_limits(result: Any, target: Path | None, argv: list[str]) -> Path | None:
    """The recommended limits, written whole (or not at all) under their provenance."""
    if target is None:
        return None
    from lab.sizing import size
    from taskfuse.limits.files import write_limits

    command = shlex.join(["lab", *argv])
    write_limits(size.recommended_limits(result), target, size.limits_header(result, command))
    return target
