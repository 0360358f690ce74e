"""The Store protocol: persistence in the language of the domain, not CRUD.

Every implementation (memory, SQLite, PostgreSQL) honours the same contract:

* `swap(new, expected_version)` writes a record built by `task.move` only if the stored
  version is still `expected_version`; otherwise it writes nothing and answers False. That
  is the whole concurrency story: a lost race is an ordinary answer.
* `claim` picks ready tasks — PENDING, `not_before` passed, every dependency SUCCESS, batch
  under its cap, none of its downstreams blocked — in priority order (higher first), then by
  the time they became ready, then by submission order, and moves each through the table.
* Reads return snapshots; callers never mutate what a store hands out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Batch, Task


@runtime_checkable
class Store(Protocol):
    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        """Insert all or nothing; a task whose idempotency_key exists yields (existing, False)."""
        ...

    def get(self, task_id: str) -> Task | None: ...

    def find(self, id_or_trace: str) -> list[Task]:
        """Tasks whose task_id or trace_id equals the argument."""
        ...

    def swap(self, new: Task, expected_version: int) -> bool:
        """Compare-and-set one record; False (and nothing written) on a lost race."""
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

    def pending_created_before(self, cutoff: float) -> list[Task]: ...

    def dependents(self, task_id: str) -> list[Task]:
        """Tasks that list `task_id` in depends_on."""
        ...

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """How many tasks are in each status (of one batch, or of all)."""
        ...

    def put_batch(self, batch: Batch) -> Batch:
        """Create a batch, or return the one with that id."""
        ...

    def get_batch(self, batch_id: str) -> Batch | None: ...

    def batch_ids(self) -> list[str]: ...

    def batch_tasks(
        self, batch_id: str, statuses: Iterable[TaskStatus] | None = None
    ) -> list[Task]: ...

    def next_ready_at(self, now: float) -> float | None:
        """When the earliest PENDING task held back by not_before becomes claimable."""
        ...

    def next_deadline(self) -> float | None:
        """The earliest started_at + timeout among RUNNING tasks."""
        ...

    def heartbeat(self, task_id: str, worker_id: str, now: float) -> bool:
        """Renew the lease of a task this worker runs; False if it no longer holds it."""
        ...

    def running(self) -> list[Task]: ...

    def all_tasks(self) -> list[Task]: ...
