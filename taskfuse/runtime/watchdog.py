"""The watchdog: deadlines at the core's next due time, and worker threads that got stuck.

* Deadlines. It asks the core to `expire` at its next deadline (`watchdog_wait`) and stops
  the attempts held here that moved. A claim between the store's answer and the wait leaves
  its deadline in `_sooner` (`claimed`, under `_mu`), so it cannot be missed: a deadline
  claimed before the question is in the store's answer, one claimed after it in `_sooner`.
* Stuck threads. A thread whose attempt was told to stop but whose code has not returned
  is stuck after `stuck_after_s`: it no longer counts as capacity, and a new thread replaces
  it while at most `stuck_threads_max` are stuck (`taskfuse.core.capacity`, the rule the
  lab applies too), so a hang storm cannot start more than workers + stuck_threads_max.
  A coroutine that swallowed its CancelledError is stuck the same way, under the same bound:
  its slot on the event loop is given back (`free_slot`) instead of a thread started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from taskfuse.core.capacity import replaces_stuck
from taskfuse.core.scheduler import DEADLINE_SLACK_S
from taskfuse.core.task import Task
from taskfuse.runtime.attempts import AttemptKey, Stuck
from taskfuse.runtime.shared import Shared, task_extra

log = logging.getLogger("taskfuse.runtime")

#: How soon the watchdog looks again at a held outcome past its deadline.
HELD_RECHECK_S = 0.25


class Watchdog:
    """Expiry at the core's deadlines and stuck-thread replacement (module doc)."""

    def __init__(self, shared: Shared, every_s: float, stuck_after_s: float,
                 stuck_threads_max: int, thread_of: dict[AttemptKey, str],
                 add_worker: Callable[[], None],
                 free_slot: Callable[[AttemptKey], None] | None = None) -> None:
        self.shared = shared
        self.every_s = every_s
        self.stuck_after_s = stuck_after_s
        self.stuck_threads_max = stuck_threads_max
        self._thread_of = thread_of
        self._add_worker = add_worker
        self._free_slot = free_slot
        self._mu = threading.Condition(threading.Lock())
        self._due = float("inf")
        #: The soonest deadline claimed since the watchdog last asked the store.
        self._sooner = float("inf")

    def run(self) -> None:
        """Expire at the core's next deadline until the worker closes (module doc)."""
        sh = self.shared
        while not sh.closing.is_set():
            with self._mu:
                self._sooner = float("inf")
            now = sh.clock()
            with sh.attempts.mu:  # ended here, outcome not yet written: not running
                held = frozenset(c.task.task_id for c, _ in sh.attempts.committing.values())
            try:
                moved = sh.scheduler.expire(now, held)
                wait = sh.scheduler.watchdog_wait(now, self.every_s)
            except Exception as exc:
                if not sh.health.said_full(exc):
                    log.exception("watchdog pass failed")
                moved, wait = [], self.every_s
            if held and wait <= DEADLINE_SLACK_S:  # a held one is past its deadline: look
                wait = HELD_RECHECK_S  # again soon, not in a tight loop until it lands
            self._expired(moved)
            if self._check_stuck():
                wait = min(wait, self.stuck_after_s / 2)
            with self._mu:
                due = min(now + wait, self._sooner + DEADLINE_SLACK_S)
                self._due = due
                if not sh.closing.is_set():
                    self._mu.wait(max(0.0, due - now))

    def claimed(self, deadlines: Iterable[float]) -> None:
        """Attempts with these deadlines were claimed: wake sooner if one is due first."""
        soonest = min(deadlines, default=None)
        if soonest is None:
            return
        with self._mu:  # read and written under its lock, or lost (module doc)
            self._sooner = min(self._sooner, soonest)
            if soonest + DEADLINE_SLACK_S < self._due:
                self._mu.notify()

    def wake(self) -> None:
        """Look now (the shutdown's end: `closing` is set)."""
        with self._mu:
            self._mu.notify_all()

    def _expired(self, moved: list[Task]) -> None:
        if not moved:
            return
        sh = self.shared
        with sh.attempts.mu:
            sh.stats.expired += len(moved)
            sh.stats.failed += sum(t.worker_id == sh.worker_id for t in moved)
        for task in moved:
            sh.stop_task(task.task_id)
            log.info("watchdog: task %s %s (%s)", task.task_id, task.status.value,
                     task.error_msg, extra=task_extra(task))
        sh.changed()

    def _check_stuck(self) -> bool:
        """Promote stopped attempts whose thread did not return to stuck; replace their
        threads up to the bound. Answers whether any stopped attempt is still pending."""
        at = self.shared.attempts
        with at.mu:
            fresh = at.newly_stuck(self.stuck_after_s, self._thread_of)
            for i, stuck in enumerate(fresh):  # one at a time, as if they came in turn
                self._replace(stuck, len(at.stuck) - (len(fresh) - 1 - i))
            return bool(at.stopped) and len(at.stuck) < len(at.stopped)

    def _replace(self, stuck: Stuck, count: int) -> None:
        """A thread no longer counts as capacity: start another while at most
        `stuck_threads_max` are stuck (`count`: this one included), so there are never more
        than workers + stuck_threads_max threads (attempts.mu held)."""
        sh = self.shared
        at = sh.attempts
        extra = {"task_id": stuck.task_id}
        what = "a coroutine" if stuck.coroutine else f"worker thread {stuck.thread}"
        if not replaces_stuck(count, self.stuck_threads_max):
            log.error("%s is stuck on task %s (kind %r) and is not replaced: %d are stuck, "
                      "over the bound of %d; %d threads left to work", what, stuck.task_id,
                      stuck.kind, count, self.stuck_threads_max, at.live_threads, extra=extra)
            return
        stuck.replaced = True
        at.replacements += 1
        sh.stats.replaced += 1
        log.warning("%s is stuck on task %s (kind %r), which ignored its stop for %.1fs; %s "
                    "(%d stuck, bound %d)", what, stuck.task_id, stuck.kind,
                    time.monotonic() - stuck.stopped_at,
                    "gave its slot on the event loop back" if stuck.coroutine
                    else "started a replacement", count, self.stuck_threads_max, extra=extra)
        if stuck.coroutine:
            assert self._free_slot is not None and stuck.key is not None
            self._free_slot(stuck.key)
        else:
            self._add_worker()

    def stuck_threads(self) -> list[dict[str, Any]]:
        """Threads (and coroutines) busy with an attempt that is no longer RUNNING: kind,
        task, seconds since the stop, whether a replacement took its place, and whether it
        is a coroutine (metrics, the trace, status)."""
        at = self.shared.attempts
        now = time.monotonic()
        with at.mu:
            return [{"kind": s.kind, "task_id": s.task_id, "thread": s.thread,
                     "for_s": round(now - s.stopped_at, 3), "replaced": s.replaced,
                     "coroutine": s.coroutine}
                    for s in at.stuck.values()]
