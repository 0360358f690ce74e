"""Periodic batches: the schedules of an App, and the worker's role that submits their ticks.

A schedule comes from code (`App.periodic`, on a task or on a function that builds the
batch) or from the limits file (`schedules:`, `taskfuse.limits.schedules`; a name in both is
the file's). Every worker process runs the same `ScheduleLoop` beside its heartbeat and
watchdog: it sleeps until the soonest next tick of its schedules, then submits each due tick
as one batch whose id and idempotency keys are made of the schedule's name and the tick
(`taskfuse.core.ticks`). Every worker of a fleet tries; the store's dedupe lets exactly one
batch per tick in, whichever worker was first, and a worker killed mid-tick leaves the tick
to the others (or to itself when it restarts, by the same keys).

What counts as due, what happens to ticks missed while no worker ran (`skip`,
`run_last_once`) and at DST changes is decided by the pure `taskfuse.core.ticks.due`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from taskfuse.core.task import Batch, TaskSpec
from taskfuse.core.ticks import (
    DEFAULT_GRACE_S,
    Cron,
    Missed,
    due,
    next_tick,
    tick_batch_id,
    tick_key,
)
from taskfuse.limits.schedules import ScheduleLimits, cron_in
from taskfuse.runtime.ids import new_task_id

log = logging.getLogger("taskfuse.runtime.schedules")

#: The longest the loop sleeps at once: a wall clock stepped forward (NTP, a resumed VM) is
#: noticed within this, never polled faster.
MAX_SLEEP_S = 60.0
#: After a store error the tick is tried again this much later (still one batch: same keys).
RETRY_S = 1.0

#: Builds the task specs of one tick from the tick's time (an aware datetime in the zone).
Builder = Callable[[datetime], Sequence[TaskSpec]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A batch submitted at each tick of `cron`: `build(app, tick)` says what it holds."""

    name: str
    cron: Cron
    tz: str
    missed: Missed = "skip"
    grace_s: float = DEFAULT_GRACE_S
    cap: int | None = None
    #: One task of `kind` per tick (payload: `payload`, else the tick) ...
    kind: str | None = None
    payload: Any = None
    #: ... or several tasks, each (kind, payload) ...
    tasks: tuple[tuple[str, Any], ...] = ()
    #: ... or whatever a function builds for the tick.
    builder: Builder | None = None

    def build(self, app: Any, tick: float) -> list[TaskSpec]:
        """The specs of the batch at `tick`, keyed for the store's dedupe, each with a task
        id of this process's own (unless the builder chose one): a submit answered with
        another id was another worker's."""
        at = datetime.fromtimestamp(tick, self.cron.tz)
        if self.builder is not None:
            specs = list(self.builder(at))
        else:
            pairs = self.tasks or ((self.kind or "", self.payload),)
            specs = [app.spec(kind, payload if payload is not None else
                              {"schedule": self.name, "tick": at.isoformat()})
                     for kind, payload in pairs]
        return [replace(spec, idempotency_key=tick_key(self.name, tick, i),
                        task_id=spec.task_id or new_task_id())
                for i, spec in enumerate(specs)]

    @property
    def kinds(self) -> list[str]:
        """The kinds it submits (a builder's are known only when it runs)."""
        if self.builder is not None:
            return []
        return [kind for kind, _ in self.tasks] if self.tasks else [self.kind or ""]

    def describe(self) -> str:
        what = (f"{self.builder.__qualname__}()" if self.builder is not None
                else self.kind or f"{len(self.tasks)} tasks")
        return f"{self.name}: {self.cron.expr!r} {self.tz}, {what}, missed {self.missed}"


def from_limits(entries: Mapping[str, ScheduleLimits]) -> dict[str, Schedule]:
    """The schedules of a limits file's `schedules:`."""
    return {name: Schedule(name, cron_in(s.cron, s.tz), s.tz, s.missed, s.grace_s, s.cap,
                           kind=s.kind, payload=s.payload,
                           tasks=tuple((t.kind, t.payload) for t in s.tasks))
            for name, s in entries.items()}


def periodic_schedule(name: str, valid: ScheduleLimits, kind: str | None, fn: Callable[..., Any],
                      payload: Any) -> Schedule:
    """The schedule `App.periodic` declares: of task `kind`, else built by `fn`."""
    return Schedule(name, cron_in(valid.cron, valid.tz), valid.tz, valid.missed, valid.grace_s,
                    valid.cap, kind=kind, payload=payload,
                    builder=None if kind is not None else fn)


def schedule_role(runner: Any, closing: threading.Event) -> ScheduleLoop | None:
    """The schedule role of a runner whose app has schedules (kinds checked now), else None."""
    schedules = list(runner.app.schedules.values())
    if not schedules:
        return None
    for s in schedules:
        for kind in s.kinds:
            runner.app.definition(kind)
    runner.schedule_loop = ScheduleLoop(runner, schedules, closing)
    return runner.schedule_loop  # type: ignore[no-any-return]


class ScheduleLoop:
    """The worker's schedule role: wakes at the next tick, submits what is due (module doc).

    `runner` is the host: its `app`, `store`, `scheduler`, `clock`, `stopping` and
    `work_changed()`; `closing` is set when it shuts down.
    """

    def __init__(self, runner: Any, schedules: Sequence[Schedule],
                 closing: threading.Event) -> None:
        self.runner = runner
        self.schedules = list(schedules)
        self.closing = closing
        #: When each schedule last asked `due` (None: not since this process started).
        self.after: dict[str, float | None] = {s.name: None for s in self.schedules}
        #: Ticks this process put in (created) and found already in (another worker's).
        self.submitted = 0
        self.found = 0

    def run(self) -> None:
        log.info("schedules: %s", "; ".join(s.describe() for s in self.schedules))
        while not self.closing.is_set() and not self.runner.stopping:
            wake = self.step(self.runner.clock())
            self.closing.wait(max(0.0, min(wake - self.runner.clock(), MAX_SLEEP_S)))

    def step(self, now: float) -> float:
        """Submit every due tick; answer when to look again."""
        wake = now + MAX_SLEEP_S
        for s in self.schedules:
            failed = next((tick for tick in due(s.cron, self.after[s.name], now, s.missed,
                                                s.grace_s)
                           if not self._tick(s, tick, now)), None)
            if failed is not None:  # from it on, every tick still on time is tried again
                self.after[s.name] = min(self.after[s.name] or failed, failed) - 1e-3
                wake = min(wake, now + RETRY_S)
                continue
            self.after[s.name] = now
            upcoming = next_tick(s.cron, now)
            if upcoming is not None:
                wake = min(wake, upcoming)
        return wake

    def _tick(self, s: Schedule, tick: float, now: float) -> bool:
        """Submit one tick; False when the store failed (the tick is tried again)."""
        batch_id = tick_batch_id(s.name, tick)
        try:
            specs = s.build(self.runner.app, tick)
            for spec in specs:
                self.runner.app.definition(spec.kind)
        except Exception:  # the app's own bug: this tick is lost, the next may do better
            log.exception("schedule %s: building batch %s failed; tick skipped", s.name,
                          batch_id)
            return True
        try:
            self.submit(s, tick, specs, now)
        except Exception:  # the store is down: the same tick again, same keys
            log.exception("schedule %s: batch %s not submitted; trying again in %gs",
                          s.name, batch_id, RETRY_S)
            return False
        return True

    def submit(self, s: Schedule, tick: float, specs: Sequence[TaskSpec], now: float) -> bool:
        """Submit the batch of `s` at `tick`; True if this process created it."""
        runner = self.runner
        app = runner.app
        batch_id = tick_batch_id(s.name, tick)
        runner.store.put_batch(Batch(batch_id, s.cap, now, {"schedule": s.name,
                                                            "tick": tick}))
        tasks = app.submit_to(runner.scheduler, specs, now, batch_id)
        runner.work_changed()
        # not `created_at == now`: two workers woken by one timer may read the same clock
        created = any(t.task_id == spec.task_id for t, spec in zip(tasks, specs, strict=True))
        if created:
            self.submitted += 1
            log.info("schedule %s: submitted batch %s (tasks: %d)", s.name, batch_id,
                     len(tasks))
        else:
            self.found += 1
            log.debug("schedule %s: batch %s was already submitted", s.name, batch_id)
        return created


def schedule_rows(schedules: Mapping[str, Schedule], store: Any, now: float
                  ) -> list[dict[str, Any]]:
    """What `taskfuse status` shows of each schedule: its rule, its next tick, and the
    batch of its latest tick with that batch's status ("missing" if no worker put it in)."""
    from taskfuse.core.states import derive_batch_status
    from taskfuse.core.ticks import last_tick

    rows = []
    for name, s in sorted(schedules.items()):
        upcoming, latest = next_tick(s.cron, now), last_tick(s.cron, now)
        row: dict[str, Any] = {
            "schedule": name, "cron": s.cron.expr, "tz": s.tz, "missed": s.missed,
            "next_tick": _iso(upcoming, s), "last_batch": None, "last_status": None}
        if latest is not None:
            batch_id = tick_batch_id(name, latest)
            counts = store.counts(batch_id)
            row["last_batch"] = batch_id
            row["last_status"] = (derive_batch_status(counts).value
                                  if store.get_batch(batch_id) is not None or any(
                                      counts.values()) else "missing")
        rows.append(row)
    return rows


def _iso(t: float | None, s: Schedule) -> str | None:
    """A tick as local time in the schedule's zone, with its offset."""
    return None if t is None else datetime.fromtimestamp(t, s.cron.tz).isoformat()
