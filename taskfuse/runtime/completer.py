"""The completer: outcomes go to the store in groups, and held attempts go back to PENDING.

Outcomes that arrived while the previous group was being written, or within `group_wait_s`
while other attempts are about to end, go to the store in one transaction
(`Scheduler.complete_many`: one round trip, version checks in the statement). An outcome is
acknowledged only once committed. If the worker process dies between a task's end and that
commit, the task's lease lapses and it runs again (at least once, as with any queue): the
window is one group, at most `group_wait_s` plus a commit. If the store is down, outcomes
are kept and written when it answers, never turned into failures; the heartbeat keeps their
leases alive meanwhile. A release (shutdown, a claim that came late) is the completer's too:
it is the other way an attempt held here leaves for the store.
"""

from __future__ import annotations

import logging
import threading
import time

from taskfuse.core.scheduler import Completed, LostRace
from taskfuse.core.task import Outcome, Task
from taskfuse.runtime.attempts import MAX_GROUP, key_of
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.errors import RESULT_ERROR
from taskfuse.runtime.health import next_pause
from taskfuse.runtime.shared import Shared, task_extra
from taskfuse.store import StoreError, StoreFull, StoreUnavailable, bounded

log = logging.getLogger("taskfuse.runtime")

Group = list[tuple[TaskContext, Outcome]]


class Completer:
    """Group commit of outcomes, and releases (module doc)."""

    def __init__(self, shared: Shared, group_wait_s: float, group: int = MAX_GROUP) -> None:
        self.shared = shared
        self.group_wait_s = group_wait_s
        #: The largest group written at once: a claim's (`attempts.group_of`).
        self.group = group
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        """Commit outcomes in groups; keep them through a store outage."""
        sh, at = self.shared, self.shared.attempts
        pause = 0.0
        while True:
            group = self._next_group()
            if group is None:
                return
            try:
                answers = self.write(group)
            except StoreUnavailable as exc:  # keep every outcome; write it when it answers
                pause = next_pause(pause)
                log.warning("could not write %d outcome(s): %s; keeping them, trying again "
                            "in %.2fs", len(group), exc, pause)
                with at.mu:
                    if not sh.closed:
                        at.outcomes.wait(pause)
                continue
            except Exception as exc:
                if sh.closed:  # the store was closed after our shutdown: done
                    return
                pause = next_pause(pause)
                if not sh.health.said_full(exc):
                    log.exception("writing %d outcome(s) failed; keeping them", len(group))
                with at.mu:
                    at.outcomes.wait(pause)
                continue
            pause = 0.0
            sh.health.not_full()
            self.committed(group, answers)

    def write(self, group: Group) -> list[Completed | LostRace]:
        """One group in one round trip. When the store refuses a value of the group (a
        result it cannot keep), each outcome is written alone and the refused one becomes a
        `result_error` failure of its task, instead of holding up the rest."""
        sh = self.shared
        now = sh.clock()
        try:
            return sh.scheduler.complete_many([(c.task, o) for c, o in group], now)
        except (StoreUnavailable, StoreFull):
            raise
        except StoreError as exc:
            if sh.closed:
                raise
            if len(group) > 1:
                return [answer for item in group for answer in self.write([item])]
            ctx, _ = group[0]
            log.error("the store refused the outcome of task %s: %s", ctx.task.task_id, exc,
                      extra=task_extra(ctx.task))
            failure = Outcome.failure(RESULT_ERROR, f"outcome could not be stored: {exc}")
            return sh.scheduler.complete_many([(ctx.task, failure)], now)

    def _next_group(self) -> Group | None:
        """The outcomes to write next: all waiting, up to a group; wait briefly for more
        while other attempts are about to finish (a group commit's window)."""
        sh, at = self.shared, self.shared.attempts
        with at.mu:
            while not at.committing:
                if sh.closed:
                    return None
                at.outcomes.wait()
            end = time.monotonic() + self.group_wait_s
            while (len(at.committing) < self.group and (at.busy() > 0 or at.aio)
                   and not sh.closed):
                left = end - time.monotonic()
                if left <= 0:
                    break
                at.outcomes.wait(left)
            return [at.committing[k] for k in list(at.committing)[:self.group]]

    def committed(self, group: Group, answers: list[Completed | LostRace]) -> None:
        """Count what the store answered, and wake the claimer and the joiners."""
        sh, at = self.shared, self.shared.attempts
        stats = sh.stats
        lost = []
        with at.mu:
            for (ctx, outcome), answer in zip(group, answers, strict=True):
                at.committing.pop(key_of(ctx.task), None)
                if isinstance(answer, LostRace):
                    stats.discarded += 1
                    lost.append((ctx, answer))
                else:
                    stats.completed += 1
                    stats.failed += not outcome.ok
            stats.groups += 1
            at.settled.notify_all()
        sh.claim_wake.set()  # retries, freed batch slots and released dependents
        for ctx, answer in lost:
            now = answer.current.status.value if answer.current is not None else "gone"
            ctx.logger.info("late result discarded: the task is %s now", now)

    def drain(self, timeout: float) -> None:
        """Wait for the completer to write what is outstanding, at most `timeout`; after an
        earlier shutdown (the completer gone), write it here."""
        sh, at = self.shared, self.shared.attempts
        end = time.monotonic() + timeout
        if self.thread is not None and not self.thread.is_alive():
            with at.mu:
                group = list(at.committing.values())
            if group:
                try:
                    with bounded(sh.store, timeout):
                        self.committed(group, self.write(group))
                except Exception:
                    log.exception("could not write %d outcome(s) at shutdown", len(group))
        with at.mu:
            at.outcomes.notify_all()
            while at.committing and time.monotonic() < end and sh.health.full is None:
                at.settled.wait(max(0.0, min(0.1, end - time.monotonic())))
            if at.committing:
                log.warning("%d outcome(s) not written at shutdown (the store did not answer); "
                            "their tasks run again when their leases lapse", len(at.committing))

    def release(self, contexts: list[TaskContext], reason: str) -> list[Task]:
        """Hand attempts back to PENDING (no attempt used) and tell them to stop."""
        sh = self.shared
        released = []
        now = sh.clock()
        for ctx in contexts:
            try:
                new = sh.scheduler.release(ctx.task, now, reason)
            except Exception as exc:
                if not sh.health.said_full(exc):
                    log.exception("could not release task %s at shutdown (its lease will "
                                  "lapse)", ctx.task.task_id, extra=task_extra(ctx.task))
                new = None
            sh.stop_task(ctx.task.task_id)
            if new is not None:
                released.append(new)
                log.info("released task %s back to PENDING (%s)", new.task_id, reason,
                         extra=task_extra(new))
        with sh.attempts.mu:
            sh.stats.released += len(released)
        if released:
            sh.claim_wake.set()
        return released
