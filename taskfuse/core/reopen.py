"""An operator's retry: tasks that ended badly go back to PENDING, with what they took down.

Rules and theory of operation
-----------------------------
* Only FAILED, TIMEOUT and CANCELED tasks reopen, and only through the table's own move,
  ``--operator_retry--> PENDING`` (`task.move` stamps who and when on the record, keeps the
  error it ended with, and counts attempts on unless `reset_attempts`).
* A dependent CANCELED because an upstream ended badly (error kind ``upstream_failed``) comes
  back with it, transitively, but only when none of its other upstreams still ends badly
  without being reopened too: otherwise it would wait for a task that will never succeed.
* A dependency that is no longer stored was pruned (a store refuses to take a task whose
  dependency it does not hold). Prune never removes a task a PENDING or RUNNING dependent
  waits for, so it went while this task was ended. A task that ran (FAILED or TIMEOUT, a
  start or a retry on its record) was claimed, and a claim needs every dependency SUCCESS,
  which is final: the pruned parent succeeded, the store already counts it as met, and the
  task reopens and runs. A task that never ran (CANCELED while PENDING) cannot tell whether
  its pruned parent succeeded or failed; reopened, it could wait forever, so it is left
  ended and named (`RetryPlan.orphaned`): submit it anew.
* Writes go dependents first, deepest first, then what was asked for: a dependent is never
  PENDING after its upstream could have failed again (that failure cancels the PENDING
  dependents, as a failure always does). A run cut short leaves dependents PENDING behind a
  still ended upstream; retrying that upstream again brings the rest back.
* Chunks of `chunk` compare-and-sets, each one `swap_many` (one transaction), one event per
  move. Nothing but an operator moves an ended task, so a lost race means another retry
  reopened it first: it is counted as skipped, never written twice. A second retry finds
  the tasks PENDING, RUNNING or ended anew and therefore reopens nothing it did not ask for.
* Counts by status and by batch follow by themselves (the stores keep them on every status
  change); the batch status is derived from them, idempotency keys stay on the same rows.
"""

from __future__ import annotations

import graphlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from taskfuse.core import states
from taskfuse.core.events import Emitter, Event, EventKind
from taskfuse.core.retry import ErrorKind
from taskfuse.core.states import BAD_ENDINGS, TaskEvent, TaskfuseError, TaskStatus
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Task, move

#: Moves per transaction: short enough that workers' commits are not held up behind one.
RETRY_CHUNK = 500
#: The statuses an operator may reopen (the table's operator_retry sources).
REOPENABLE: tuple[TaskStatus, ...] = (TaskStatus.FAILED, TaskStatus.TIMEOUT, TaskStatus.CANCELED)


class RetryRefused(TaskfuseError):
    """An operator's retry that names nothing it could reopen (unknown id, bad status)."""


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What a retry will reopen: `tasks` in write order, and which came along as dependents."""

    tasks: tuple[Task, ...]
    dependents: frozenset[str]
    #: asked for, but left ended: an upstream ended badly and is not reopened with it
    held: tuple[str, ...] = ()
    #: asked for, but left ended: it never ran and an upstream of it was pruned
    orphaned: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RetryResult:
    """What a retry did: the new PENDING records, and the planned tasks someone reopened
    first (a concurrent retry), which it left alone."""

    plan: RetryPlan
    retried: tuple[Task, ...]
    skipped: tuple[str, ...]


def parse_statuses(text: str) -> tuple[TaskStatus, ...]:
    """`FAILED,TIMEOUT` as statuses; TaskfuseError naming the bad one and what is allowed."""
    return states.parse_statuses(text, REOPENABLE, "retried")


def select(store: Store, target: str, statuses: Iterable[TaskStatus]) -> list[Task]:
    """The ended tasks `target` names in `statuses`: one task by id, else a batch's tasks.

    Raises RetryRefused for an id that is neither a task nor a batch.
    """
    wanted = frozenset(statuses)
    task = store.get(target)
    if task is not None:
        return [task] if task.status in wanted else []
    if store.get_batch(target) is None and not any(store.counts(target).values()):
        raise RetryRefused(f"no task or batch with id {target!r}")
    return store.batch_tasks(target, sorted(wanted))


def plan(store: Store, selected: Sequence[Task]) -> RetryPlan:
    """The tasks to reopen for `selected`, in write order (see the module rules)."""
    chosen: dict[str, Task] = {t.task_id: t for t in selected if t.status in BAD_ENDINGS}
    extra: dict[str, Task] = {}
    frontier = list(chosen)
    while frontier:
        found = []
        for task_id in frontier:
            for child in store.dependents(task_id):
                cid = child.task_id
                if (child.status is TaskStatus.CANCELED
                        and child.error_kind == ErrorKind.UPSTREAM_FAILED
                        and cid not in chosen and cid not in extra):
                    extra[cid] = child
                    found.append(cid)
        frontier = found
    held, orphaned = _drop_still_blocked(store, chosen, extra)
    everything = {**chosen, **extra}
    graph = {tid: [d for d in t.depends_on if d in everything] for tid, t in everything.items()}
    order = list(graphlib.TopologicalSorter(graph).static_order())
    order.reverse()  # dependents (deepest first) before their upstreams
    return RetryPlan(tuple(everything[tid] for tid in order), frozenset(extra), held,
                     orphaned)


def ran(task: Task) -> bool:
    """Did the task ever run? Then every dependency of it was SUCCESS (a claim needs that,
    and SUCCESS is final), whether or not the store still holds them."""
    return (task.status in (TaskStatus.FAILED, TaskStatus.TIMEOUT)
            or task.started_at is not None or task.retry_count > 0)


def _drop_still_blocked(store: Store, chosen: dict[str, Task],
                        extra: dict[str, Task]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Leave out tasks with an upstream that ended badly and is not reopened too, or that
    never ran and lost an upstream to a prune: PENDING, they would wait forever (dropping
    one may strand its own dependents: repeat until nothing changes). Answers the
    asked-for tasks left out: (held by an ended upstream, orphaned by a pruned one)."""
    left: dict[str, list[str]] = {"ended": [], "pruned": []}
    status: dict[str, TaskStatus | None] = {}

    def blocker(child: Task) -> str | None:
        for dep in child.depends_on:
            if dep in chosen or dep in extra:
                continue
            if dep not in status:
                parent = store.get(dep)
                status[dep] = None if parent is None else parent.status
            if status[dep] in BAD_ENDINGS:
                return "ended"
            if status[dep] is None and not ran(child):
                return "pruned"
        return None

    changed = True
    while changed:
        changed = False
        for group in (chosen, extra):
            for cid, child in list(group.items()):
                why = blocker(child)
                if why is not None:
                    del group[cid]
                    status[cid] = child.status
                    changed = True
                    if group is chosen:
                        left[why].append(cid)
    return tuple(left["ended"]), tuple(left["pruned"])


def reopen(
    store: Store, the_plan: RetryPlan, now: float, *, reset_attempts: bool = False,
    emit: Emitter | None = None, chunk: int = RETRY_CHUNK,
) -> RetryResult:
    """Write the plan: one `swap_many` per chunk, one MOVE event per task reopened."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk!r}")
    retried: list[Task] = []
    skipped: list[str] = []
    reason = "retried by operator" + (" (attempts reset)" if reset_attempts else "")
    tasks = the_plan.tasks
    for at in range(0, len(tasks), chunk):
        group = tasks[at:at + chunk]
        moves = [(_reopened(t, now, reset_attempts), t.version) for t in group]
        for (new, _), old, won in zip(moves, group, store.swap_many(moves), strict=True):
            if not won:
                skipped.append(old.task_id)
                continue
            retried.append(new)
            if emit is not None and emit.sinks:
                emit(Event(now, EventKind.MOVE, new.task_id, new.batch_id, new.trace_id,
                           old.status, new.status, reason, new.retry_count + 1, None))
    return RetryResult(the_plan, tuple(retried), tuple(skipped))


def _reopened(task: Task, now: float, reset_attempts: bool) -> Task:
    if reset_attempts:
        return move(task, TaskEvent.OPERATOR_RETRY, now, retry_count=0, last_delay=None)
    return move(task, TaskEvent.OPERATOR_RETRY, now)


def retry(
    store: Store, target: str, now: float, *, statuses: Iterable[TaskStatus] = REOPENABLE,
    reset_attempts: bool = False, dry_run: bool = False, emit: Emitter | None = None,
    chunk: int = RETRY_CHUNK,
) -> RetryResult:
    """Reopen the ended tasks `target` (a task id or a batch id) names in `statuses`, and the
    dependents they took down; `dry_run` answers the plan and writes nothing."""
    wanted = tuple(statuses)
    bad = [s for s in wanted if s not in REOPENABLE]
    if bad:
        raise RetryRefused(f"status {bad[0].value!r} cannot be retried: expected some of "
                           f"{','.join(s.value for s in REOPENABLE)}")
    the_plan = plan(store, select(store, target, wanted))
    if dry_run:
        return RetryResult(the_plan, (), ())
    return reopen(store, the_plan, now, reset_attempts=reset_attempts, emit=emit, chunk=chunk)
