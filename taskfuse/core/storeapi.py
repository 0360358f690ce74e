"""The Store protocol: persistence in the language of the domain, not CRUD.

Every implementation (memory, SQLite, PostgreSQL) honours the same contract:

* `swap(new, expected_version)` writes a record built by `task.move` only if the stored
  version is still `expected_version`; otherwise it writes nothing and answers False. That
  is the whole concurrency story: a lost race is an ordinary answer.
* `claim` picks ready tasks — PENDING, `not_before` passed, every dependency SUCCESS, batch
  under its cap, none of its downstreams blocked — in priority order (higher first), then by
  the time they became ready, then by submission order, and moves each through the table.
* Reads return snapshots; callers never mutate what a store hands out.

Attempts
--------
An attempt is one run of a task: the RUNNING record `claim` returned. `(task_id, version)`
names it, because every move bumps the version and a heartbeat does not. Every call an
attempt makes names it that way, so that only the task's current attempt is answered "yours":
`heartbeat(task_id, version, now)` renews nothing for any other attempt, and a completion or
release is a `swap` expecting that version. A worker id is not an identity: the same worker
can claim a task again (after a timeout, a release or the sweeper) while its first attempt is
still running somewhere, and that stale attempt must not renew the lease of the new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple, Protocol, runtime_checkable

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Batch, Task

#: The identity of an attempt: (task_id, version of the RUNNING record its claim returned).
Attempt = tuple[str, int]


def attempt_of(task: Task) -> Attempt:
    """The identity of the attempt `task` (a record a claim returned)."""
    return task.task_id, task.version


class WorkerBeat(NamedTuple):
    """What one worker process says of itself on every heartbeat (`Store.beat_worker`): the
    fleet view's worker list and `taskfuse status` read it, since a task row cannot tell a
    process's threads, what they are busy with, or which ignored their stop ("stuck")."""

    worker_id: str
    app: str
    threads: int
    busy: int
    stuck: int
    #: stuck threads by task kind
    stuck_kinds: dict[str, int]
    claimed: int
    completed: int
    discarded: int
    started_at: float
    beat_at: float
    #: the worker shut down (its last beat)
    stopped: bool = False
    #: attempts of this process that ended in an error: a failed outcome it committed, or
    #: its own attempt its watchdog timed out (the fleet view's errors per worker)
    failed: int = 0


def beat_of(fields: Mapping[str, Any]) -> WorkerBeat:
    """A beat read back from a store: fields it does not know (written by a newer worker)
    are left out, fields it lacks (an older worker) take their defaults."""
    return WorkerBeat(**{k: v for k, v in fields.items() if k in WorkerBeat._fields})


@runtime_checkable
class Store(Protocol):
    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        """Insert all or nothing; a task whose idempotency_key exists yields (existing, False).

        A new task's dependency must be stored or inserted with it: otherwise nothing is
        written and `taskfuse.core.dag.MissingDependency` names the task and the id, checked
        in the transaction that writes (a parent pruned since the caller looked is caught).
        """
        ...

    def get(self, task_id: str) -> Task | None: ...

    def find(self, id_or_trace: str) -> list[Task]:
        """Tasks whose task_id or trace_id equals the argument."""
        ...

    def swap(self, new: Task, expected_version: int) -> bool:
        """Compare-and-set one record; False (and nothing written) on a lost race."""
        ...

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        """Many compare-and-sets in one transaction; each move wins or loses on its own."""
        ...

    def claim(
        self, worker_id: str, now: float, limit: int, blocked: frozenset[str] = frozenset(),
        exclude: AbstractSet[str] = frozenset(),
    ) -> list[Task]:
        """Move up to `limit` ready tasks to RUNNING for `worker_id`, skipping the task ids
        in `exclude` (they stay ready for a later claim)."""
        ...

    def overdue(self, now: float) -> list[Task]:
        """RUNNING tasks whose started_at + timeout < now (the watchdog's rule)."""
        ...

    def stale_running(self, now: float, lease_s: float | None) -> list[Task]:
        """RUNNING tasks whose lease lapsed, or older than 2 x timeout (the sweeper's rule)."""
        ...

    def running_over_limit(self) -> list[Task]:
        """RUNNING tasks whose retry_count is above max_retry (the sweeper's third rule)."""
        ...

    def waiting_since_before(self, cutoff: float) -> list[Task]:
        """PENDING tasks whose `waiting_since` (when they last became PENDING, or their
        not_before if later) is before `cutoff`, oldest first (the sweeper's max-age rule)."""
        ...

    def dependents(self, task_id: str) -> list[Task]:
        """Tasks that list `task_id` in depends_on."""
        ...

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """How many tasks are in each status (of one batch, or of all)."""
        ...

    def has_unfinished(self, batch_id: str | None = None) -> bool:
        """Whether any task (of one batch, or at all) is PENDING or RUNNING."""
        ...

    def put_batch(self, batch: Batch) -> Batch:
        """Create a batch, or return the one with that id."""
        ...

    def get_batch(self, batch_id: str) -> Batch | None: ...

    def batch_ids(self) -> list[str]: ...

    def batch_tasks(
        self, batch_id: str, statuses: Iterable[TaskStatus] | None = None
    ) -> list[Task]: ...

    def dependents_of(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks that depend on any of these, each once."""
        ...

    def cancel_batch(self, batch_id: str, now: float, error_kind: str,
                     reason: str) -> list[tuple[TaskStatus, Task]]:
        """Move every task of the batch that the table lets CANCEL, at once, each version
        bumped; answers (the status each left, its new record)."""
        ...

    def next_ready_at(self, now: float) -> float | None:
        """When the earliest PENDING task held back by not_before becomes claimable."""
        ...

    def next_deadline(self) -> float | None:
        """The earliest started_at + timeout among RUNNING tasks."""
        ...

    def heartbeat(self, task_id: str, version: int, now: float) -> bool:
        """Renew the lease of the attempt that holds `task_id` at `version` (heartbeat_at, no
        new version); False ("not yours") when the task is no longer RUNNING at that version."""
        ...

    def heartbeat_many(self, attempts: Sequence[tuple[str, int]], now: float) -> list[bool]:
        """Renew the leases of the attempts (task_id, version claimed at) in one statement;
        False for an attempt that is not the task's current RUNNING one."""
        ...

    def beat_worker(self, beat: WorkerBeat) -> None:
        """Record a worker process's heartbeat (one row per worker_id, replaced)."""
        ...

    def workers(self) -> list[WorkerBeat]:
        """Every worker's last beat, the latest first."""
        ...

    def running(self) -> list[Task]: ...

    def all_tasks(self) -> list[Task]: ...
