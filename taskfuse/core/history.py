"""What a task's record itself tells of its life: the lines `taskfuse inspect` prints and the
fleet view's task history starts from.

One function for both, so the operator's command and the monitor never tell the same record
two ways (they did: "1 earlier attempt(s) failed" beside "1 earlier attempt ended in error").
A record keeps only its latest attempt's times; the trace tells every move.
"""

from __future__ import annotations

from typing import NamedTuple

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Task


class RecordLine(NamedTuple):
    """One line of a record's story: when (the store's seconds; None: the record does not
    say), and what."""

    t: float | None
    what: str


def _many(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def record_history(task: Task) -> list[RecordLine]:
    """The record's story in time order: submitted, an operator's retries, the earlier
    attempts that ended in error, the latest attempt (its start, its latest heartbeat while
    RUNNING), a backoff it waits out, how it ended."""
    out = [RecordLine(task.created_at, "submitted")]
    if task.operator_retries:  # `taskfuse retry` moved it back to PENDING after it ended
        times = "" if task.operator_retries == 1 else f" ({task.operator_retries} times in all)"
        out.append(RecordLine(task.operator_retried_at,
                              f"retried by an operator: back to PENDING{times}"))
    if task.retry_count:
        out.append(RecordLine(None, f"{_many(task.retry_count, 'earlier attempt')} ended in "
                                    f"error; last: {task.error_kind}: {task.error_msg}"))
    if task.started_at is not None:
        out.append(RecordLine(task.started_at, f"attempt {task.attempt} started on "
                                               f"{task.worker_id or '?'}"))
    if task.status is TaskStatus.RUNNING and task.heartbeat_at is not None:
        out.append(RecordLine(task.heartbeat_at, "heartbeat (latest)"))
    if task.status is TaskStatus.PENDING and task.not_before is not None:
        out.append(RecordLine(task.not_before, "eligible to run again (backoff)"))
    if task.finished_at is not None:
        failed = task.error_kind and task.status is not TaskStatus.SUCCESS  # not a past error
        detail = f": {task.error_kind}: {task.error_msg}" if failed else ""
        out.append(RecordLine(task.finished_at, f"ended {task.status.value}{detail}"))
    return out
