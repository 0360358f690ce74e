"""The worker's side of the async executor: the loop's room, its hand-over, its idle wait.

The claimer asks `room.free()` how many attempts it may claim for the event loop and hands
them over with `hand` (one `call_soon_threadsafe` per group: `AsyncExecutor.submit`); the
loop tells `started` and `finished` (the `LoopFeed` protocol of `taskfuse.runtime.aio`),
and the outcomes go to the completer in one lock and one wake-up per turn of the loop. The
claimer is woken when a group's worth of room is free, not at every ended coroutine: a
claim round trip per ended coroutine cost a store query per task at thousands a second.
A coroutine stuck past its stop (it swallowed CancelledError) gives its slot back when the
watchdog replaces it (`free_slot`), and not again when it finally ends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from taskfuse.core.task import Outcome
from taskfuse.runtime.aio import AsyncExecutor, LoopRoom
from taskfuse.runtime.app import App
from taskfuse.runtime.attempts import MAX_GROUP, AttemptKey, key_of
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.shared import Shared


class LoopSide:
    """The event loop of the async kinds, as the other roles see it (module doc)."""

    def __init__(self, shared: Shared, app: App, executor_of: Mapping[str, str],
                 async_concurrency: int | None) -> None:
        self.shared = shared
        limits = app.limits
        caps = {kind: (k.async_concurrency if (k := limits.kinds.get(kind)) else None)
                for kind, e in executor_of.items() if e == "async"}
        self.room = LoopRoom(async_concurrency or limits.async_concurrency, caps)
        #: Free slots on the loop that wake the claimer (module doc).
        self._wake_at = max(1, min(MAX_GROUP // 8, self.room.free() // 16))
        self.aio = AsyncExecutor(self, lambda kind: app.definition(kind).fn, caps,
                                 shared.emit, shared.clock, shared.worker_id)

    def hand(self, contexts: list[TaskContext]) -> None:
        """Claimed attempts for the loop (attempts.mu held): counted against its room."""
        at = self.shared.attempts
        for ctx in contexts:
            at.aio[key_of(ctx.task)] = ctx
            self.room.take(ctx.task.kind)

    def started(self, ctx: TaskContext) -> None:
        """A coroutine took the attempt: its wait since the claim is a thread_wait, as a
        buffered task's."""
        self.shared.began(ctx.task)

    def finished(self, ended: list[tuple[TaskContext, Outcome]]) -> None:
        """Coroutine attempts ended: their outcomes wait for the completer's next group."""
        at = self.shared.attempts
        with at.mu:
            for ctx, outcome in ended:
                key = key_of(ctx.task)
                at.stopped.pop(key, None)
                stuck = at.stuck.pop(key, None)
                if at.aio.pop(key, None) is not None and not (stuck and stuck.replaced):
                    self.room.give(ctx.task.kind)
                at.committing[key] = (ctx, outcome)
            at.outcomes.notify()
            if not at.aio:
                at.loop_idle.notify_all()
            wake = (not at.aio or self.room.free() >= self._wake_at) and not self.shared.drained
        # Room for a group on the loop: one claim for many ends, not one each; none when
        # the last claim found the store empty (`Shared.drained`: new work wakes the claimer).
        if wake:
            self.shared.claim_wake.set()

    def free_slot(self, key: AttemptKey) -> None:
        """A coroutine stuck past its stop gives its slot back (attempts.mu held; the
        watchdog's replacement of it): the room and its kind's cap count it no more."""
        ctx = self.shared.attempts.aio.get(key)
        if ctx is None:
            return
        self.room.give(ctx.task.kind)
        self.aio.free_slot(ctx)
        self.shared.claim_wake.set()

    def wait_idle(self, until: float) -> None:
        """Wait until no attempt is on the event loop, or the monotonic time `until`."""
        at = self.shared.attempts
        with at.mu:
            while at.aio and time.monotonic() < until:
                at.loop_idle.wait(max(0.0, until - time.monotonic()))

    def lag(self) -> tuple[float, float]:
        """The event loop's lag now and the largest seen, in seconds."""
        return self.aio.lag_s, self.aio.lag_max_s
