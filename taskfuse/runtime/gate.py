"""The fuse gate: the one short lock under which a worker makes its fuse decisions.

The Scheduler's decisions (rng, budgets, breakers) and every admission of a downstream call
or a pool hold `lock` briefly and never across a store call or user code. An attempt the
core queues on a bulkhead or a pool leaves its permit here (`permit_waiting`), so a stop
(cancel, timeout, lost lease, shutdown) can wake it as well as a grant can: the gate is the
one place that knows who waits, whatever executor (thread, process, coroutine) waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from taskfuse.runtime.attempts import AttemptKey, key_of

if TYPE_CHECKING:
    from taskfuse.core.task import Task
    from taskfuse.runtime.context import TaskContext


class FuseGate:
    """The fuse lock and the permits queued under it (module doc)."""

    def __init__(self) -> None:
        #: Re-entrant: a decision may call back into the gate (a release names a waiter).
        self.lock = threading.RLock()
        self._permits: dict[AttemptKey, Any] = {}

    def permit_waiting(self, task: Task, permit: Any) -> None:
        """An attempt is queued on a bulkhead or a pool (lock held): a stop must wake it
        too. Keyed by attempt: a stale attempt and its task's retry may both wait."""
        self._permits[key_of(task)] = permit

    def permit_done(self, task: Task) -> None:
        """The attempt's queued wait ended (lock held)."""
        self._permits.pop(key_of(task), None)

    def grant(self, woken: Iterable[Any]) -> None:
        """Wake the waiters the core handed a permit to (lock held)."""
        for permit in woken:
            permit.granted = True
            if permit.event is not None:
                permit.event.set()

    def stop(self, found: Iterable[TaskContext], task_id: str,
             only: AttemptKey | None = None) -> None:
        """Tell these contexts to stop and wake the queued permits of `task_id`'s attempts
        (or of `only` that one), so a waiter sees the stop at once."""
        with self.lock:
            for ctx in found:
                ctx.signal_stop()
            for key in [k for k in self._permits if k[0] == task_id and only in (None, k)]:
                permit = self._permits[key]
                if permit.event is not None:
                    permit.event.set()
