"""The host: the narrow interface task code and executors use to reach a worker's roles.

A task context (thread, process or async), a downstream call and a pool permit ask a worker
for a few things only: the fuse gate (its `lock`, `clock`, the Scheduler's guards, the
waiters it wakes with `grant`), the store (through the Scheduler), the per-call clients and
pool sections, the fleet permits, the event sinks, and the attempt registry's wake-ups
(`permit_waiting`, `work_changed`). This Protocol names exactly that, so they depend on it
and not on the Runner that happens to implement it; a test may stand in a small host of its
own, and an executor added later does not reach into private state.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import threading

    from taskfuse.core.events import Event
    from taskfuse.core.scheduler import Scheduler
    from taskfuse.core.task import Task
    from taskfuse.runtime.calls import CallClient, Waits
    from taskfuse.runtime.fleet_limits import FleetLimits
    from taskfuse.runtime.pools import PoolSection


class Host(Protocol):
    """What a running attempt may ask of the worker that holds it (module doc)."""

    #: The fuse lock: admissions and records of the fuses hold it briefly, never across I/O.
    lock: threading.RLock
    worker_id: str
    scheduler: Scheduler
    store: Any
    fleet: dict[str, FleetLimits]
    clients: dict[str, CallClient]
    pools: dict[str, PoolSection]
    waits: Waits

    def clock(self) -> float:
        """Wall-clock seconds, as the core's `now`."""
        ...

    def store_lock(self) -> AbstractContextManager[Any]:
        """A context for a store call from task code (no lock on today's stores)."""
        ...

    def permit_waiting(self, task: Task, permit: Any) -> None:
        """An attempt is queued on a bulkhead or a pool (fuse lock held): a stop wakes it."""
        ...

    def permit_done(self, task: Task) -> None:
        """The attempt's queued wait ended (fuse lock held)."""
        ...

    def grant(self, woken: Iterable[Any]) -> None:
        """Wake the waiters the core handed a permit to (fuse lock held)."""
        ...

    def work_changed(self) -> None:
        """Claimable work may have appeared (a breaker closed); takes no lock."""
        ...

    def emit(self, event: Event) -> None:
        """Send an event to the sinks."""
        ...

    def emit_wait(self, task: Task, subject: str, seconds: float, now: float) -> None:
        """A bulkhead wait of `seconds` by `task` on `subject`."""
        ...
