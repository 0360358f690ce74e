"""The claimer: ready tasks claimed in groups into the prefetch buffer and onto the loop.

It claims as many attempts as the free worker threads plus a prefetch (adaptive, and at
least claim_batch - 1 per thread when the limits say so; outcomes waiting for their commit
count against the prefetch only beyond it, so a claim and a commit are in flight at once:
`Attempts.want`), plus the event loop's room (`LoopRoom`). Never a task whose downstream's
bulkhead is already full of tasks held here, nor more at once than the fullest bulkhead has
room for (`taskfuse.core.capacity.claim_room`, `bulkhead_room`), nor one whose previous
attempt is still stuck on a thread here. Idle, it waits for a submit, a completion, the
store's wake-up (the listener) or the core's next due time (`Idle.until`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from taskfuse.core.capacity import claim_room
from taskfuse.core.scheduler import Work
from taskfuse.core.task import Task
from taskfuse.runtime.aio import AsyncTaskContext
from taskfuse.runtime.attempts import group_of, key_of
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.health import next_pause
from taskfuse.runtime.host import Host
from taskfuse.runtime.loopfeed import LoopSide
from taskfuse.runtime.shared import Shared

log = logging.getLogger("taskfuse.runtime")


class Claimer:
    """Claims in groups for the executors (module doc)."""

    def __init__(self, shared: Shared, host: Host, *, executor_of: Mapping[str, str],
                 overlap: frozenset[str], loop: LoopSide | None, poll_s: float | None,
                 release: Callable[[list[TaskContext], str], list[Task]],
                 claimed: Callable[[list[float]], None]) -> None:
        self.shared = shared
        self._host = host
        self._executor_of = executor_of
        #: Kinds whose retries may run beside a stuck earlier attempt (kinds.KIND.overlap).
        self._overlap = overlap
        self._thread_kinds = any(e != "async" for e in executor_of.values()) \
            or not executor_of
        self._group = group_of(executor_of)
        self._loop = loop
        self._poll_s = poll_s
        self._release = release
        self._claimed = claimed  # the watchdog's: deadlines of a fresh claim
        #: The last claim found nothing (or none was made): only then does a join ask the
        #: store whether anything is left.
        self.idle = True
        #: Tasks a claim in flight brought after the stop, released by the claimer itself.
        self.released_late: list[Task] = []

    def run(self) -> None:
        """Claim in groups while there is room; idle until woken or the core's due time."""
        sh = self.shared
        at = sh.attempts
        pause = 0.0
        while True:
            sh.claim_wake.clear()
            with at.mu:
                if sh.stopping:
                    self.idle = True  # claims no more: a join asks the store
                    at.settled.notify_all()
                    return
                want = min(self.want(), self._group)
                exclude = at.excluded(self._overlap) if want > 0 else frozenset()
                full, room = self.bulkhead_room() if want > 0 else (frozenset(), None)
                if room is not None:  # the claim may bring only tasks that call it
                    want = min(want, room)
            if want <= 0:  # every thread busy and the prefetch taken: wait for room
                sh.drained = False
                sh.claim_wake.wait(self._poll_s or 1.0)
                continue
            now = sh.clock()
            try:
                answer = sh.scheduler.claim(sh.worker_id, now, want, exclude=exclude,
                                            also_blocked=full)
            except Exception as exc:
                pause = next_pause(pause)
                if not sh.health.said_full(exc):
                    log.exception("claim failed; trying again in %.2fs", pause)
                sh.claim_wake.wait(pause)
                continue
            pause = 0.0
            if isinstance(answer, Work):
                with at.mu:
                    wrote_all = not at.committing
                if wrote_all:  # it wrote, and no outcome waits to be written: room again
                    sh.health.not_full()
                self.idle = False
                sh.drained = False
                self._buffer(answer.tasks)
                continue
            sh.drained = not exclude and not full
            if not self.idle:
                with at.mu:
                    self.idle = True  # nothing claimable now: a join may ask
                    at.settled.notify_all()
            wait = self._poll_s
            if answer.until is not None:
                until = max(0.0, answer.until - sh.clock())
                wait = until if wait is None else min(wait, until)
            sh.claim_wake.wait(wait)

    def want(self) -> int:
        """How many attempts a claim may bring now: for the worker threads (their free
        threads and prefetch) and for the event loop (its room) (attempts.mu held). A claim
        cannot choose kinds, so in an app of both, either side may get a few of the other's
        share, waiting RUNNING in its buffer or its kind's queue."""
        want = self.shared.attempts.want() if self._thread_kinds else 0
        if self._loop is not None:
            want = max(0, want) + self._loop.room.free()
        return want

    def bulkhead_room(self) -> tuple[frozenset[str], int | None]:
        """Downstreams whose bulkhead is already full of tasks held here, and the fewest
        more tasks any other bulkhead has room for (None: no bulkhead) (attempts.mu held).

        A claim skips the tasks of the full ones and takes no more than that room: every
        task of its group might call the same downstream, and a task claimed past what a
        bulkhead can start soon would sit RUNNING on a thread or in the buffer, its lease and
        timeout counting, while a task of another downstream waits PENDING. "Soon" is the
        prefetch's: a bulkhead of k holds k tasks plus k times the prefetch per thread (its
        permits work through them as fast as threads work through the buffer, about 50 ms
        while tasks are short), and k only once tasks are long; without it a bulkhead of 1
        cost a claim round trip per task (SQLite FULL: 280 tasks/s instead of 6,000). Tasks
        whose outcome waits for its commit hold nothing here. The rule is the core's
        (`claim_room`); this counts what it needs."""
        limits = {name: g.bulkhead.limit for name, g in self.shared.scheduler.guards.items()
                  if g.bulkhead is not None}
        if not limits:
            return frozenset(), None
        held: dict[str, int] = {}
        at = self.shared.attempts
        for ctx in [*at.buffer, *at.running.values(), *at.aio.values()]:
            if key_of(ctx.task) in at.stuck:
                continue
            for name in ctx.task.downstreams:
                if name in limits:
                    held[name] = held.get(name, 0) + 1
        ahead = at.prefetch_now() / max(1, at.live_threads)  # per permit, as per thread
        return claim_room(limits, held, ahead)

    def take_buffer(self) -> list[TaskContext]:
        """Empty the buffer (shutdown): its attempts never started."""
        at = self.shared.attempts
        with at.mu:
            taken = list(at.buffer)
            at.buffer.clear()
            at.work.notify_all()
        return taken

    def _buffer(self, tasks: list[Task]) -> None:
        """Hand claimed attempts to the executors; wake the watchdog for a sooner deadline."""
        sh = self.shared
        contexts, on_loop = self._contexts(tasks)
        at = sh.attempts
        with at.mu:
            sh.stats.claimed += len(contexts) + len(on_loop)
            late = sh.stopping  # claimed while shutdown took the buffer: never started
            if not late:
                at.buffer.extend(contexts)
                at.work.notify(len(contexts))
                if on_loop:
                    assert self._loop is not None
                    self._loop.hand(on_loop)
        if on_loop and not late:
            assert self._loop is not None
            self._loop.aio.submit(on_loop)
        contexts += on_loop
        if late:  # back at once, as the buffer's were (shutdown returns them too)
            released = self._release(contexts, "shutdown")
            with at.mu:
                self.released_late += released
            return
        self._claimed([t.deadline for t in tasks if t.deadline is not None])

    def _contexts(self, tasks: list[Task]) -> tuple[list[TaskContext], list[TaskContext]]:
        """Contexts of claimed attempts: for the worker threads, and for the event loop."""
        host = self._host
        if self._loop is None:
            return [TaskContext(task, host) for task in tasks], []
        threads: list[TaskContext] = []
        on_loop: list[TaskContext] = []
        loop, executor_of = self._loop.aio.loop, self._executor_of
        for task in tasks:
            if executor_of.get(task.kind) == "async":
                on_loop.append(AsyncTaskContext(task, host, loop))
            else:  # an unknown kind fails on a thread, saying so
                threads.append(TaskContext(task, host))
        return threads, on_loop
