"""What the roles of one worker process share: the core, the registry, the gate, the wake-ups.

A worker is a few roles around one Scheduler (see `taskfuse.runtime.threads`): the claimer,
the completer, the watchdog, the heartbeat, the listener and the executors. None of them
reads another's private state; they meet here, in a value that holds the parts they all
need and the two signals that cross roles:

* `stop_task`: an attempt must stop (cancel, timeout, lost lease, release): the registry
  marks it, the fuse gate signals its context and wakes its queued permit;
* `changed`: something moved that may make a task claimable or a join finish: the claimer
  and the joiners wake.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from taskfuse.core.events import Event, thread_wait
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import Task
from taskfuse.runtime.attempts import AttemptKey, Attempts, RunnerStats
from taskfuse.runtime.gate import FuseGate
from taskfuse.runtime.health import StoreHealth

log = logging.getLogger("taskfuse.runtime")


@dataclass(eq=False)
class Shared:
    """The parts every role of a worker uses (module doc)."""

    worker_id: str
    clock: Callable[[], float]
    scheduler: Scheduler
    #: The store the roles call: a MemoryStore wrapped in `LockedStore`, else the store.
    store: Any
    attempts: Attempts
    gate: FuseGate
    stats: RunnerStats = field(default_factory=RunnerStats)
    health: StoreHealth = field(default_factory=StoreHealth)
    #: Set when the claimer should look again (room, work, a wake-up of the store).
    claim_wake: threading.Event = field(default_factory=threading.Event)
    #: Set once at the end of a shutdown: the periodic roles end.
    closing: threading.Event = field(default_factory=threading.Event)
    #: The claimer's last claim found nothing, and held nothing back (no excluded task, no
    #: full bulkhead): room freed on an executor is then no reason to claim again, new work
    #: is (a submit, a commit, the store's wake-up, a due time: each wakes the claimer).
    drained: bool = False
    #: The shutdown began (set under `attempts.mu`): claim no more, start nothing new.
    stopping: bool = False
    #: The shutdown is over (set under `attempts.mu`): the completer and joiners end.
    closed: bool = False

    def stop_task(self, task_id: str, only: AttemptKey | None = None) -> None:
        """Tell every attempt of `task_id` held here (or `only` that one) to stop, buffered
        ones too."""
        at = self.attempts
        with at.mu:
            found = at.mark_stopped(task_id, only)
        self.gate.stop(found, task_id, only)

    def let_go(self, keys: set[AttemptKey], why: str) -> int:
        """These attempts' tasks ended elsewhere (a batch canceled): the claimed-ahead ones
        leave the buffer unrun, the others are told to stop. Answers how many left the
        buffer; they count as discarded, as their late results would have."""
        at = self.attempts
        with at.mu:
            ahead = at.take_ahead(keys)
            self.stats.discarded += len(ahead)
        for key in keys:
            self.stop_task(key[0], key)
        if ahead:
            log.info("let go %d claimed-ahead task(s) unrun: %s", len(ahead), why)
            self.changed()  # room in the buffer; a join may end
        return len(ahead)

    def emit(self, event: Event) -> None:
        """Send an event to the scheduler's sinks."""
        if self.scheduler.emit.sinks:
            self.scheduler.emit(event)

    def began(self, task: Task) -> None:
        """An executor took a claimed attempt. A prefetched task is RUNNING from its claim
        but begins only now: say how long it waited, so run times count from the start of
        its code (as in the lab, which claims for a free worker only)."""
        if not self.scheduler.emit.sinks:
            return
        now = self.clock()
        waited = now - task.started_at if task.started_at is not None else 0.0
        if waited > 0:
            self.scheduler.emit(thread_wait(task, now, waited))

    def changed(self) -> None:
        """Something moved that may make a task claimable or a join finish."""
        self.claim_wake.set()
        at = self.attempts
        with at.mu:
            at.settled.notify_all()


def task_extra(task: Task) -> dict[str, str]:
    """The `extra` of a runner log line about a task: every line of a task has its trace_id."""
    return {"task_id": task.task_id, "trace_id": task.trace_id}
