"""The ticks of a periodic schedule: cron arithmetic in a time zone, as epoch seconds.

Theory of operation
-------------------
A schedule is a cron expression read in an explicit time zone (a `tzinfo` the caller looked
up: finding a zone reads tz files, so it happens outside the core). Its *ticks* are the
instants the expression names; each tick is submitted once across a whole fleet because its
batch id and idempotency keys are made of the schedule's name and the tick (`tick_batch_id`,
`tick_key`): every worker may try, the store's dedupe answers all but the first.

The expression is parsed and walked by cronsim (5 fields, or 6 with seconds first), whose
daylight-saving rules are Debian cron's, and ours:

* **gap** (clocks jump forward, e.g. 02:00 -> 03:00 in Paris on the last Sunday of March):
  a job at a fixed local time inside the gap ("30 2 * * *") runs once, at the first instant
  after the gap (03:00 local); a job with a wildcard minute or hour ("*/15 * * * *") runs on
  real elapsed time, so the local times that do not exist simply have no tick.
* **overlap** (clocks go back, 03:00 -> 02:00 on the last Sunday of October): a fixed-time
  job inside the overlap runs once, at the first of the two instants; a wildcard job runs at
  every real instant that matches, both passes included.

Missed ticks. A tick is *on time* while at most `grace_s` has passed since it; a driver asks
`due(cron, after, now, missed, grace_s)` with `after` the time it last asked (None when it
just started) and gets at most ONE tick back, the latest tick in `(after, now]`: older ticks
in that span are never back-filled. The policy decides a latest tick that is late:

* ``skip``: not submitted; the schedule resumes at its next tick.
* ``run_last_once``: submitted once (late), so a nightly batch missed while no worker ran
  runs when the first worker starts, however long the outage was (and only one night's).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Literal

from cronsim import CronSim, CronSimError

from taskfuse.core.states import TaskfuseError

Missed = Literal["skip", "run_last_once"]
MISSED_POLICIES: tuple[Missed, ...] = ("skip", "run_last_once")
#: How late a tick may be and still count as on time (`due`).
DEFAULT_GRACE_S = 60.0


class ScheduleError(TaskfuseError):
    """A cron expression cronsim cannot read, or one that never fires."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression read in the time zone `tz`."""

    expr: str
    tz: tzinfo

    def __post_init__(self) -> None:
        try:
            CronSim(self.expr, datetime(2000, 1, 1, tzinfo=self.tz))
        except (CronSimError, ValueError, IndexError) as exc:
            raise ScheduleError(f"cron expression {self.expr!r}: {exc or 'not readable'}"
                                ) from None


def next_tick(cron: Cron, after: float) -> float | None:
    """The first tick strictly after `after` (None: the expression never fires again)."""
    walk = CronSim(cron.expr, datetime.fromtimestamp(math.floor(after), cron.tz))
    for at in walk:
        t = at.timestamp()
        if t > after:  # a local time read before an overlap's second pass is earlier
            return t
    return None


def last_tick(cron: Cron, now: float) -> float | None:
    """The latest tick at or before `now` (None if there is none)."""
    back = CronSim(cron.expr, datetime.fromtimestamp(math.floor(now) + 1, cron.tz),
                   reverse=True)
    anchor = next(back, None)
    if anchor is None:
        return None
    # walking backwards and forwards can disagree around a DST change: forward is the truth
    last, t = None, next_tick(cron, anchor.timestamp() - 1)
    while t is not None and t <= now:
        last, t = t, next_tick(cron, t)
    return last if last is not None else min(anchor.timestamp(), now)


def ticks(cron: Cron, start: float, end: float) -> Iterator[float]:
    """Every tick in `(start, end]`, in order (the lab's arrivals walk them)."""
    t = next_tick(cron, start)
    while t is not None and t <= end:
        yield t
        t = next_tick(cron, t)


def due(cron: Cron, after: float | None, now: float, missed: Missed = "skip",
        grace_s: float = DEFAULT_GRACE_S) -> float | None:
    """The tick to submit now, if any: the latest in `(after, now]` (in `(-inf, now]` when
    `after` is None), when on time or when the policy runs a late one (module doc)."""
    last = last_tick(cron, now)
    if last is None or (after is not None and last <= after):
        return None
    if now - last <= grace_s or missed == "run_last_once":
        return last
    return None


def tick_batch_id(name: str, tick: float) -> str:
    """The batch of schedule `name` at `tick`: the same in every process, e.g.
    ``nightly@2026-12-02T01:00:00Z``."""
    return f"{name}@{datetime.fromtimestamp(tick, UTC):%Y-%m-%dT%H:%M:%SZ}"


def tick_key(name: str, tick: float, index: int) -> str:
    """The idempotency key of task `index` of the batch of `name` at `tick`."""
    return f"schedule:{tick_batch_id(name, tick)}#{index}"
