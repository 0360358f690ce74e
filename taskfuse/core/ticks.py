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

Missed ticks. A tick is *on time* while at most `grace_s` has passed since it. A driver asks
`due(cron, after, now, missed, grace_s)`, `after` being when it last asked (None when it just
started), and submits what it answers: every on-time tick in `(after, now]` (a loop woken
late still submits the ticks it slept through: the keys make a repeat a no-op); a worker
that just started takes only the latest tick, when it is on time (it cannot know which
earlier ones the fleet put in, and never back-fills). For a latest tick later than that the
policy decides:

* ``skip``: never submitted; the schedule resumes at its next tick.
* ``run_last_once``: when no tick is on time, the latest late one is submitted, once, so a
  nightly batch missed while no worker ran runs when the first worker starts, however long
  the outage was (and only the last night's, never a back-fill of every night).
"""

from __future__ import annotations

import math
from collections import deque
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
#: The most on-time ticks one `due` answers (a per-second schedule with a long grace).
MAX_CATCH_UP = 1000


class ScheduleError(TaskfuseError, ValueError):
    """A cron expression cronsim cannot read, or a time zone not known (a ValueError too, so
    a limits file's validation names the key)."""


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
    return next(ticks(cron, after, math.inf), None)


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
    """Every tick in `(start, end]`, in order, from one walk of the expression."""
    last = start
    for at in CronSim(cron.expr, datetime.fromtimestamp(math.floor(start), cron.tz)):
        t = at.timestamp()
        if t > end:
            return
        if t > last:  # a local time read before an overlap's second pass is earlier
            last = t
            yield t


def due(cron: Cron, after: float | None, now: float, missed: Missed = "skip",
        grace_s: float = DEFAULT_GRACE_S) -> list[float]:
    """The ticks to submit now, oldest first (module doc): the on-time ticks in
    `(after, now]` (just started: the latest, if on time), else under ``run_last_once`` the
    latest late one."""
    if after is not None:
        on_time = list(deque(ticks(cron, max(after, now - grace_s), now),
                             maxlen=MAX_CATCH_UP))
        if on_time or missed == "skip":
            return on_time
    last = last_tick(cron, now)
    if last is None or (after is not None and last <= after):
        return []
    return [last] if now - last <= grace_s or missed == "run_last_once" else []


def tick_batch_id(name: str, tick: float) -> str:
    """The batch of schedule `name` at `tick`: the same in every process, e.g.
    ``nightly@2026-12-02T01:00:00Z``."""
    return f"{name}@{datetime.fromtimestamp(tick, UTC):%Y-%m-%dT%H:%M:%SZ}"


def tick_key(name: str, tick: float, index: int) -> str:
    """The idempotency key of task `index` of the batch of `name` at `tick`."""
    return f"schedule:{tick_batch_id(name, tick)}#{index}"
