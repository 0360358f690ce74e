"""The task state machine: every status a task can have and every legal move between them.

Rules and theory of operation
-----------------------------
A task is always in exactly one `TaskStatus`. Its status changes only through a `TaskEvent`
looked up in `TRANSITIONS`, the one table of legal moves; `next_status` is the single function
that performs the lookup and raises `IllegalTransition` for anything else. Stores call it on
every move and guard the write with the task's version (compare-and-set), so two actors that
race on one task can never both win: the loser's write touches zero rows and it re-reads.

The table encodes the lifecycle of DESIGN.md:

* PENDING --claim--> RUNNING. A worker took it.
* RUNNING --succeed--> SUCCESS; --fail--> FAILED (not retryable, or attempts exhausted).
* A failure is not a verdict: RUNNING --retry--> PENDING (retry_count + 1, not_before later).
* The watchdog, not the task, notices a deadline: RUNNING --time_out--> TIMEOUT, or
  --timeout_retry--> PENDING when the policy retries timeouts.
* Cancel changes the status at once, also of a RUNNING task: the worker sees it through its
  context and stops itself; its late result then loses the version check and is discarded.
* The sweeper reclaims tasks whose worker vanished: --orphan_fail--> FAILED or
  --orphan_retry--> PENDING; it cancels PENDING tasks older than a max age (--expire-->).
* When a dependency ends badly its dependents are canceled (--upstream_failed-->).
* Graceful shutdown hands unfinished work back (--release--> PENDING, not an attempt), and a
  task refused by an open circuit breaker waits again without burning an attempt
  (--defer--> PENDING).
* SUCCESS, FAILED, TIMEOUT and CANCELED are terminal: nothing a worker, the watchdog or the
  sweeper does moves them again, written down below. SUCCESS has no exit at all.
* Only an operator reopens what ended badly: FAILED, TIMEOUT or CANCELED --operator_retry-->
  PENDING (`taskfuse retry`), a move of its own so that no automatic actor can ever
  resurrect a terminal record: a late result still loses its version check.
"""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    """Where a task is in its lifecycle. The string values are what stores persist."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELED = "CANCELED"


class TaskEvent(StrEnum):
    """What happened to a task; with its status it names exactly one next status."""

    CLAIM = "claim"
    SUCCEED = "succeed"
    FAIL = "fail"
    RETRY = "retry"
    TIME_OUT = "time_out"
    TIMEOUT_RETRY = "timeout_retry"
    CANCEL = "cancel"
    UPSTREAM_FAILED = "upstream_failed"
    EXPIRE = "expire"
    ORPHAN_FAIL = "orphan_fail"
    ORPHAN_RETRY = "orphan_retry"
    RELEASE = "release"
    DEFER = "defer"
    OPERATOR_RETRY = "operator_retry"


class BatchStatus(StrEnum):
    """A batch's status is derived from its tasks' statuses, never stored on its own."""

    RUNNING = "RUNNING"
    PARTIAL_SUCCESS = "PARTIAL_SUCCESS"
    ALL_SUCCESS = "ALL_SUCCESS"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    #: No task of the batch is kept: none was submitted yet, or retention pruned them all.
    #: What they ended as is not known any more, so it claims neither success nor failure.
    EMPTY = "EMPTY"


P, R = TaskStatus.PENDING, TaskStatus.RUNNING
E = TaskEvent

#: The one table of legal moves: (status, event) -> next status.
TRANSITIONS: dict[tuple[TaskStatus, TaskEvent], TaskStatus] = {
    (P, E.CLAIM): R,
    (P, E.CANCEL): TaskStatus.CANCELED,
    (P, E.UPSTREAM_FAILED): TaskStatus.CANCELED,
    (P, E.EXPIRE): TaskStatus.CANCELED,
    (R, E.SUCCEED): TaskStatus.SUCCESS,
    (R, E.FAIL): TaskStatus.FAILED,
    (R, E.RETRY): P,
    (R, E.TIME_OUT): TaskStatus.TIMEOUT,
    (R, E.TIMEOUT_RETRY): P,
    (R, E.CANCEL): TaskStatus.CANCELED,
    (R, E.ORPHAN_FAIL): TaskStatus.FAILED,
    (R, E.ORPHAN_RETRY): P,
    (R, E.RELEASE): P,
    (R, E.DEFER): P,
    (TaskStatus.FAILED, E.OPERATOR_RETRY): P,
    (TaskStatus.TIMEOUT, E.OPERATOR_RETRY): P,
    (TaskStatus.CANCELED, E.OPERATOR_RETRY): P,
}
del P, R, E

#: Statuses no automatic actor moves out of (only OPERATOR_EVENTS do). Listed, not inferred,
#: so the table test can check both agree.
TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.SUCCESS, TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.CANCELED}
)

#: Terminal statuses that cancel a task's dependents.
BAD_ENDINGS: frozenset[TaskStatus] = frozenset(
    {TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.CANCELED}
)

#: Moves only a person asks for: the one way out of a terminal status.
OPERATOR_EVENTS: frozenset[TaskEvent] = frozenset({TaskEvent.OPERATOR_RETRY})

#: Moves that count as a new attempt being used up (retry_count + 1).
RETRY_EVENTS: frozenset[TaskEvent] = frozenset(
    {TaskEvent.RETRY, TaskEvent.TIMEOUT_RETRY, TaskEvent.ORPHAN_RETRY}
)


class TaskfuseError(Exception):
    """Base of every error the core raises."""


class IllegalTransition(TaskfuseError):
    """A move the table does not allow: a bug in the caller, never a race."""

    def __init__(self, task_id: str, status: TaskStatus, event: TaskEvent) -> None:
        self.task_id = task_id
        self.status = status
        self.event = event
        super().__init__(
            f"illegal move for task {task_id!r}: no transition from {status.value} on "
            f"{event.value!r}"
        )


def next_status(task_id: str, status: TaskStatus, event: TaskEvent) -> TaskStatus:
    """The status `event` moves a task in `status` to; raises IllegalTransition otherwise."""
    try:
        return TRANSITIONS[status, event]
    except KeyError:
        raise IllegalTransition(task_id, status, event) from None


def parse_statuses(text: str, allowed: tuple[TaskStatus, ...], doing: str
                   ) -> tuple[TaskStatus, ...]:
    """'FAILED,timeout' as statuses among `allowed` (in order, once each); TaskfuseError
    naming the first other one and what is allowed (`doing`: 'retried', 'pruned')."""
    out = []
    for part in (p.strip().upper() for p in text.split(",")):
        if part not in {s.value for s in allowed}:
            raise TaskfuseError(f"status {part!r} cannot be {doing}: expected some of "
                                f"{','.join(s.value for s in allowed)}")
        out.append(TaskStatus(part))
    return tuple(dict.fromkeys(out))


def derive_batch_status(counts: dict[TaskStatus, int]) -> BatchStatus:
    """A batch's status from the counts of its tasks by status.

    Any task still PENDING or RUNNING keeps the batch RUNNING. Once all are terminal: all
    SUCCESS is ALL_SUCCESS, some SUCCESS is PARTIAL_SUCCESS, all CANCELED is CANCELED, and
    anything else (no success at all) is FAILED. A batch with no task kept is EMPTY (it
    read ALL_SUCCESS once, which a batch pruned after failing everything is not). A batch
    partly pruned reads from the tasks kept.
    """
    if counts.get(TaskStatus.PENDING, 0) or counts.get(TaskStatus.RUNNING, 0):
        return BatchStatus.RUNNING
    total = sum(counts.values())
    if not total:
        return BatchStatus.EMPTY
    ok = counts.get(TaskStatus.SUCCESS, 0)
    if ok == total:
        return BatchStatus.ALL_SUCCESS
    if ok:
        return BatchStatus.PARTIAL_SUCCESS
    if counts.get(TaskStatus.CANCELED, 0) == total:
        return BatchStatus.CANCELED
    return BatchStatus.FAILED


def mermaid_diagram() -> str:
    """The state diagram drawn from the table, for the docs (`python -m taskfuse.core.states`)."""
    lines = ["stateDiagram-v2", "    [*] --> PENDING"]
    lines += [f"    {s.value} --> {d.value}: {e.value}" for (s, e), d in TRANSITIONS.items()]
    lines += [f"    {s.value} --> [*]" for s in TaskStatus if s in TERMINAL]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a docs helper
    print(mermaid_diagram())
