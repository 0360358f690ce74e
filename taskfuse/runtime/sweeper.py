"""The orphan sweeper: reclaims what dead workers left behind, as a process of its own.

Why a separate process: the sweeper exists for the case where workers died (kill -9, an OOM,
a lost machine); living inside a worker, it would die with them ("do not let the street
sweeper live in the house you are demolishing"). Run it with `taskfuse sweep --store URL`.

Each pass applies the core's three rules (`Scheduler.sweep`, which says why each is what it
is; `RULES` below is how `taskfuse sweep --help` states them). Every move goes through the
version check, so a slow worker that does report back after all simply loses the race.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, runtime_checkable

from taskfuse.core.events import EventSink
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Task
from taskfuse.runtime.app import DEFAULT_LEASE_S, App
from taskfuse.runtime.retention import prune
from taskfuse.store import StoreUnavailable, describe_error

log = logging.getLogger("taskfuse.sweeper")

#: The rules of a pass, for operators (`taskfuse sweep --help`, the docs).
RULES = """\
Each pass applies three rules, each on its own, every move through the version check:
  1. orphans: a RUNNING task whose lease lapsed (no heartbeat for --lease seconds), or
     RUNNING longer than 2 x its timeout whatever its lease, goes back to PENDING when
     attempts remain, else FAILED (error_kind "orphaned": worker crashed or task hung).
     Not within a lease of the database answering again after an outage (PostgreSQL):
     its workers could not renew leases meanwhile and may hold outcomes to commit.
  2. waited too long: a PENDING task waiting longer than --max-pending-age is CANCELED
     ("expired"). Waiting counts from when it last became PENDING (submitted, retried,
     deferred by a breaker, released at shutdown, requeued by rule 1), or from its
     not_before when that is later: never from created_at, so a pass does not cancel what
     it has just requeued.
  3. beyond its attempts: a RUNNING task whose retry_count is above its max_retry (only an
     operator's edit or a bug writes such a record) is FAILED at once, lease or not
     ("attempts_exceeded"). The last attempt (retry_count == max_retry) is legitimate and
     is ended only by rule 1, then FAILED rather than retried.
With the limits' sweeper.retention_s, a pass then deletes ended tasks that finished longer
ago than that (as `taskfuse prune --older-than`).
"""


def sweeper_scheduler(
    store: Store,
    *,
    lease_s: float | None = DEFAULT_LEASE_S,
    max_pending_age_s: float | None = None,
    sinks: Iterable[EventSink] = (),
) -> Scheduler:
    """A Scheduler configured only for the sweeper's rules (no task functions needed)."""
    app = App("sweeper", lease_s=lease_s, max_pending_age_s=max_pending_age_s)
    return app.scheduler(store, sinks=sinks)


@runtime_checkable
class KnowsOutages(Protocol):
    """A store that can tell how long its database has answered without a break
    (PostgresStore); an embedded store has no outage to tell of."""

    def answering_for(self) -> float:
        """Seconds since the database last came back (or started)."""
        ...


def answering_for(store: object) -> float | None:
    """How long `store` has answered without a break, or None when it cannot tell."""
    return store.answering_for() if isinstance(store, KnowsOutages) else None


def sweep_once(scheduler: Scheduler, now: float) -> list[Task]:
    """One pass; logs every move with the task's trace_id. Lapsed leases wait a lease after
    the database answers again (`Scheduler.sweep`): their workers may be alive, holding
    outcomes they could not commit during the outage."""
    answering = answering_for(scheduler.store)
    moved = scheduler.sweep(now, answering)
    if scheduler.leases_wait(answering):
        log.info("the store answers again since %.1fs: lapsed leases wait a lease (%gs)",
                 answering, scheduler.config.lease_s)
    for task in moved:
        log.info(
            "swept task %s -> %s (%s)", task.task_id, task.status.value, task.error_msg,
            extra={"task_id": task.task_id, "trace_id": task.trace_id},
        )
    return moved


def prune_old(store: Store, retention_s: float, now: float,
              stop: threading.Event | None = None) -> int:
    """The retention part of a pass: ended tasks older than `retention_s` go; logged."""
    report = prune(store, retention_s, now, stop=stop)
    if report.total:
        counts = ", ".join(f"{n} {s.value}" for s, n in report.removed.items())
        log.info("pruned %d ended task(s) older than %gs: %s", report.total, retention_s,
                 counts)
    return report.total


def run_sweeper(
    scheduler: Scheduler,
    *,
    every_s: float = 60.0,
    once: bool = False,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.time,
    lock: AbstractContextManager[Any] | None = None,
    on_moved: Callable[[list[Task]], None] | None = None,
    retention_s: float | None = None,
) -> int:
    """Sweep now and then every `every_s` seconds until `stop` is set; returns tasks moved.

    A failed pass (the database restarting) is logged and tried again at the next interval.
    In a process that also runs workers on the same Scheduler (the load test), `lock` is
    held around each pass (the Runner's fuse lock) and `on_moved` hears of the tasks a pass
    moved, under it (to wake the claimer: requeued work is claimable). With `retention_s`,
    each pass then prunes ended tasks older than that (outside `lock`: it takes its time).
    """
    if every_s <= 0:
        raise ValueError(f"sweep interval must be > 0 seconds, got {every_s!r}")
    stop = stop or threading.Event()
    total = 0
    while True:
        try:
            with lock or nullcontext():
                moved = sweep_once(scheduler, clock())
                if moved and on_moved is not None:
                    on_moved(moved)
            total += len(moved)
            if retention_s is not None:
                prune_old(scheduler.store, retention_s, clock(), stop)
        except StoreUnavailable as exc:  # an outage is expected: one line per pass, no trace
            if once:
                raise
            log.warning("sweep pass failed, the store is unavailable: %s; trying again in %gs",
                        describe_error(exc), every_s)
        except Exception:
            if once:
                raise
            log.exception("sweep pass failed; trying again in %gs", every_s)
        if once or stop.wait(every_s):
            return total

