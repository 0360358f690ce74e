"""The operator's after-the-fact commands of `taskfuse`: retry what ended, wait for it, prune.

Kept apart from cli.py (the worker, submit, status, cancel, sweep and inspect commands) so
each module has one job; cli.py registers these with `add_commands` and shares its helpers.

    taskfuse retry  --store URL TASK_OR_BATCH [--status FAILED,TIMEOUT,CANCELED]
                    [--reset-attempts] [--dry-run]
    taskfuse wait   --store URL TASK_OR_BATCH [--timeout S] [--json]
    taskfuse result --store URL TASK [--json]
    taskfuse prune  --store URL --older-than AGE [--status S,...] [--batch B] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from taskfuse.cliparts import CliError, opened_store, positive_float
from taskfuse.core import reopen
from taskfuse.core.states import TaskfuseError, TaskStatus
from taskfuse.core.task import Task
from taskfuse.textable import columns

#: At most this many tasks are listed one per line; the rest are counted.
_LISTED = 20


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register retry, wait, result and prune on the `taskfuse` parser."""
    _add_retry(sub, common)
    _add_wait(sub, common)
    _add_result(sub, common)
    _add_prune(sub, common)


def _argument(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser that raises TaskfuseError: the message, one line."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except TaskfuseError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _add_retry(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "retry", parents=[common], help="put ended tasks (a task or a batch's) back to PENDING",
        description="Put FAILED, TIMEOUT and CANCELED tasks back to PENDING (the table's "
                    "operator_retry move, one compare-and-set each, in chunks): one task by "
                    "id, or every such task of a batch. Dependents CANCELED because of them "
                    "come back too. Safe while workers run; a second retry finds nothing. "
                    "Exit 0: something was retried (or would be, with --dry-run); 1: "
                    "nothing to retry; 2: a usage mistake.")
    p.add_argument("target", metavar="TASK_OR_BATCH")
    p.add_argument("--status", type=_argument(reopen.parse_statuses), default=reopen.REOPENABLE,
                   metavar="S[,S...]", help="which ended statuses to retry "
                   "(default FAILED,TIMEOUT,CANCELED)")
    p.add_argument("--reset-attempts", action="store_true",
                   help="start the attempt count again (default: one more attempt each)")
    p.add_argument("--dry-run", action="store_true", help="list what would be retried")
    p.set_defaults(func=cmd_retry)


def cmd_retry(args: argparse.Namespace) -> int:
    with opened_store(args.store) as store:
        result = reopen.retry(store, args.target, time.time(), statuses=args.status,
                              reset_attempts=args.reset_attempts, dry_run=args.dry_run)
    planned = result.plan.tasks
    if result.plan.held:
        print(f"left {len(result.plan.held)} task(s) ended: an upstream stays ended "
              f"(retry it first): {', '.join(result.plan.held[:_LISTED])}")
    if result.plan.orphaned:
        print(f"left {len(result.plan.orphaned)} task(s) ended: they never ran and an "
              "upstream was pruned, so whether it succeeded is unknown (submit them anew): "
              f"{', '.join(result.plan.orphaned[:_LISTED])}")
    if not planned:
        wanted = ",".join(s.value for s in args.status)
        print(f"nothing to retry: no {wanted} task in {args.target}")
        return 1
    verb = "would retry" if args.dry_run else "retried"
    done = planned if args.dry_run else result.retried
    _print_retried(done, result.plan.dependents)
    print(f"{verb} {len(done)} task(s): {_by_status(planned, done)}"
          + (f" ({len(result.plan.dependents)} as dependents)" if result.plan.dependents else ""))
    if result.skipped:
        print(f"skipped {len(result.skipped)} task(s) another retry reopened first")
    return 0


def _by_status(planned: tuple[Task, ...], done: tuple[Task, ...]) -> str:
    """'2 FAILED, 1 TIMEOUT': what the reopened tasks ended as before."""
    was = {t.task_id: t.status for t in planned}
    counts = Counter(was[t.task_id] for t in done)
    return ", ".join(f"{counts[s]} {s.value}" for s in reopen.REOPENABLE if counts[s]) or "none"


def _print_retried(done: tuple[Task, ...], dependents: frozenset[str]) -> None:
    rows = [[t.task_id, t.batch_id or "-", t.error_kind or "-",
             "dependent" if t.task_id in dependents else "asked"] for t in done[:_LISTED]]
    if rows:
        print("\n".join(columns(["TASK", "BATCH", "ENDED WITH", "WHY"], rows)))
    if len(done) > _LISTED:
        print(f"... and {len(done) - _LISTED} more")


# -- wait and result -----------------------------------------------------------------------

#: Exit status of `wait` and `result` by what the task or batch ended as.
EXIT_BY_STATUS = {"SUCCESS": 0, "ALL_SUCCESS": 0, "FAILED": 3, "TIMEOUT": 4, "CANCELED": 5,
                  "PARTIAL_SUCCESS": 6, "EMPTY": 8}
#: `result` of a task that has not ended yet.
EXIT_UNFINISHED = 7
#: `wait` whose --timeout passed first (as coreutils' timeout).
EXIT_WAIT_TIMEOUT = 124
_EXIT_HELP = ("Exit status: 0 SUCCESS (a batch: ALL_SUCCESS), 3 FAILED, 4 TIMEOUT, 5 CANCELED, "
              "6 PARTIAL_SUCCESS (a batch), 8 EMPTY (a batch with no task kept: none submitted "
              "yet, or all pruned), {extra}2 a usage mistake (unknown id), 1 an "
              "internal error.")


def _add_wait(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "wait", parents=[common], help="wait until a task or a batch has ended",
        description="Wait until the task (or else the batch) of that id has ended, woken by "
                    "the store (PostgreSQL notifications; SQLite's data_version), asking it "
                    "a few times a second at most while a batch drains. "
                    + _EXIT_HELP.format(extra=f"{EXIT_WAIT_TIMEOUT} --timeout passed first, "))
    p.add_argument("target", metavar="TASK_OR_BATCH")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="give up after S seconds (default: wait as long as it takes)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=cmd_wait)


def _add_result(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "result", parents=[common], help="print a task's stored result, or its error",
        description="Print the result a task stored (JSON) on stdout, or the error it ended "
                    "with on stderr. "
                    + _EXIT_HELP.format(extra=f"{EXIT_UNFINISHED} not ended yet, "))
    p.add_argument("task", metavar="TASK")
    p.add_argument("--json", action="store_true",
                   help="print status, result and error as one JSON object")
    p.set_defaults(func=cmd_result)


def cmd_wait(args: argparse.Namespace) -> int:
    from taskfuse.runtime.waiting import WaitError, wait

    with opened_store(args.store) as store:
        try:
            got = wait(store, args.target, args.timeout)
        except WaitError as exc:
            raise CliError(str(exc)) from None
    code = EXIT_BY_STATUS.get(got.status, 1) if got.done else EXIT_WAIT_TIMEOUT
    if args.json:
        data: dict[str, Any] = {"target": got.target, "kind": got.kind, "status": got.status,
                                "ended": got.done, "waited_s": round(got.waited_s, 3),
                                "exit": code}
        if got.task is not None:
            data.update(_outcome_json(got.task))
        else:
            data["counts"] = {s.value: n for s, n in got.counts.items()}
        print(json.dumps(data, default=str))
        return code
    what = f"{got.kind} {got.target}"
    if not got.done:
        print(f"{what} still {got.status} after {got.waited_s:.1f}s")
    elif got.task is not None:
        print(f"{what} ended {got.status} after waiting {got.waited_s:.1f}s"
              + _error_of(got.task))
    else:
        counts = ", ".join(f"{n} {s.value}" for s, n in got.counts.items() if n)
        print(f"{what} ended {got.status} after waiting {got.waited_s:.1f}s: "
              + (counts or "no task kept (none submitted yet, or all pruned)"))
    return code


def cmd_result(args: argparse.Namespace) -> int:
    with opened_store(args.store) as store:
        task = store.get(args.task)
    if task is None:
        raise CliError(f"no task with id {args.task!r}")
    ended = task.status not in (TaskStatus.PENDING, TaskStatus.RUNNING)
    code = EXIT_BY_STATUS[task.status.value] if ended else EXIT_UNFINISHED
    if args.json:
        print(json.dumps({"task_id": task.task_id, **_outcome_json(task), "exit": code},
                         default=str))
    elif task.status is TaskStatus.SUCCESS:
        print(json.dumps(task.result))
    elif ended:
        print(f"task {task.task_id} ended {task.status.value}{_error_of(task)}", file=sys.stderr)
    else:
        print(f"task {task.task_id} is {task.status.value}: no result yet", file=sys.stderr)
    return code


def _outcome_json(task: Task) -> dict[str, Any]:
    failed = task.status is not TaskStatus.SUCCESS
    return {"status": task.status.value, "result": task.result,
            "error_kind": task.error_kind if failed else None,
            "error_msg": task.error_msg if failed else None}


def _error_of(task: Task) -> str:
    if task.status is TaskStatus.SUCCESS or not task.error_kind:
        return ""
    return f": {task.error_kind}: {task.error_msg}"


# -- prune ---------------------------------------------------------------------------------


def _add_prune(sub: Any, common: argparse.ArgumentParser) -> None:
    from taskfuse.runtime.retention import ENDED, PRUNE_CHUNK, parse_age, parse_ended

    p = sub.add_parser(
        "prune", parents=[common], help="delete ended tasks older than an age",
        description="Delete ended tasks (SUCCESS, FAILED, TIMEOUT, CANCELED) that finished "
                    "longer ago than --older-than, in transactions of "
                    f"{PRUNE_CHUNK} rows with a pause between them so running workers keep "
                    "their turn. Never a PENDING or RUNNING task, never one a PENDING or "
                    "RUNNING dependent still needs. The kept counts follow. The sweeper does "
                    "the same on each pass with the limits' sweeper.retention_s. Exit 0 "
                    "(also when nothing was old enough), 2 a usage mistake.")
    p.add_argument("--older-than", type=_argument(parse_age), required=True, metavar="AGE",
                   help="finished longer ago than this: 7d, 12h, 30m, 45s or seconds")
    p.add_argument("--status", type=_argument(parse_ended), default=ENDED, metavar="S[,S...]",
                   help="only these ended statuses (default all four)")
    p.add_argument("--batch", help="only this batch's tasks")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.set_defaults(func=cmd_prune)


def cmd_prune(args: argparse.Namespace) -> int:
    from taskfuse.runtime.retention import ENDED, prune

    with opened_store(args.store) as store:
        report = prune(store, args.older_than, time.time(), statuses=args.status,
                       batch_id=args.batch, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    counts = ", ".join(f"{report.removed[s]} {s.value}" for s in ENDED if report.removed.get(s))
    where = f" of batch {args.batch}" if args.batch else ""
    print(f"{verb} {report.total} ended task(s){where} older than {args.older_than:g}s"
          + (f": {counts}" if counts else ""))
    return 0
