"""The orphan sweeper: reclaims what dead workers left behind, as a process of its own.

Why a separate process: the sweeper exists for the case where workers died (kill -9, an OOM,
a lost machine); living inside a worker, it would die with them ("do not let the street
sweeper live in the house you are demolishing"). Run it with `taskfuse sweep --store URL`.

Each pass applies the core's sweeper rules (`Scheduler.sweep`, DESIGN.md): a RUNNING task
whose lease lapsed, or that is older than 2 x its timeout, goes back to PENDING when attempts
remain, else FAILED ("worker crashed or task hung"); a PENDING task older than the max
pending age is CANCELED. Every move goes through the version check, so a slow worker that
does report back after all simply loses the race.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from taskfuse.core.events import EventSink
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Task
from taskfuse.runtime.app import DEFAULT_LEASE_S, App

log = logging.getLogger("taskfuse.sweeper")


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


def sweep_once(scheduler: Scheduler, now: float) -> list[Task]:
    """One pass; logs every move with the task's trace_id."""
    moved = scheduler.sweep(now)
    for task in moved:
        log.info(
            "swept task %s -> %s (%s)", task.task_id, task.status.value, task.error_msg,
            extra={"task_id": task.task_id, "trace_id": task.trace_id},
        )
    return moved


def run_sweeper(
    scheduler: Scheduler,
    *,
    every_s: float = 60.0,
    once: bool = False,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Sweep now and then every `every_s` seconds until `stop` is set; returns tasks moved.

    A failed pass (the database restarting) is logged and tried again at the next interval.
    """
    if every_s <= 0:
        raise ValueError(f"sweep interval must be > 0 seconds, got {every_s!r}")
    stop = stop or threading.Event()
    total = 0
    while True:
        try:
            total += len(sweep_once(scheduler, clock()))
        except Exception:
            if once:
                raise
            log.exception("sweep pass failed; trying again in %gs", every_s)
        if once or stop.wait(every_s):
            return total

