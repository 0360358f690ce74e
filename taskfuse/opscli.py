"""The operator's after-the-fact commands of `taskfuse`: retry what ended.

Kept apart from cli.py (the worker, submit, status, cancel, sweep and inspect commands) so
each module has one job; cli.py registers these with `add_commands` and shares its helpers.

    taskfuse retry  --store URL TASK_OR_BATCH [--status FAILED,TIMEOUT,CANCELED]
                    [--reset-attempts] [--dry-run]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from taskfuse.core import reopen
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Task
from taskfuse.textable import columns

#: At most this many tasks are listed one per line; the rest are counted.
_LISTED = 20


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register retry on the `taskfuse` parser."""
    _add_retry(sub, common)


def _statuses(text: str) -> tuple[TaskStatus, ...]:
    try:
        return reopen.parse_statuses(text)
    except reopen.RetryRefused as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    p.add_argument("--status", type=_statuses, default=reopen.REOPENABLE,
                   metavar="S[,S...]", help="which ended statuses to retry "
                   "(default FAILED,TIMEOUT,CANCELED)")
    p.add_argument("--reset-attempts", action="store_true",
                   help="start the attempt count again (default: one more attempt each)")
    p.add_argument("--dry-run", action="store_true", help="list what would be retried")
    p.set_defaults(func=cmd_retry)


def cmd_retry(args: argparse.Namespace) -> int:
    from taskfuse.cli import opened_store

    with opened_store(args.store) as store:
        result = reopen.retry(store, args.target, time.time(), statuses=args.status,
                              reset_attempts=args.reset_attempts, dry_run=args.dry_run)
    planned = result.plan.tasks
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
