"""`schedules:` in a limits file: batches submitted on a cron schedule, in an explicit zone.

    schedules:
      nightly:                        # the schedule's name: part of each tick's batch id
        cron: "0 2 * * *"             # 5 fields, or 6 with seconds first
        tz: Europe/Paris              # required: a schedule never means "the server's zone"
        kind: sync_all                # one task of this kind per tick ...
        payload: {full: true}         #   ... with this payload (default: the tick)
        # tasks: [{kind: a, payload: 1}, {kind: b}]   # ... or a batch of several
        missed: skip                  # a tick missed while no worker ran: skip | run_last_once
        grace_s: 60                   # how late a tick may be and still count as on time
        cap: 10                       # the batch's cap

The rules of ticks, DST and missed ticks are `taskfuse.core.ticks`'s; this module looks the
zone up (the core reads no tz file) and validates the entry, naming the bad key.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, model_validator

from taskfuse.core.ticks import DEFAULT_GRACE_S, Cron, ScheduleError


@cache
def zone(name: str) -> ZoneInfo:
    """The time zone `name` (an IANA name such as "Europe/Paris" or "UTC"); ScheduleError
    for a name the tz database does not know."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"time zone {name!r} is not in the tz database (expected an IANA "
                            f"name such as 'Europe/Paris' or 'UTC')") from None


def cron_in(expr: str, tz: str) -> Cron:
    """The Cron of an expression read in the zone named `tz` (ScheduleError if either is
    bad)."""
    return Cron(expr, zone(tz))


#: A schedule's name: part of every batch id and idempotency key it makes.
ScheduleName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,100}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ScheduledTask(_Strict):
    """One task of a scheduled batch."""

    kind: str
    payload: Any = None


class ScheduleLimits(_Strict):
    """A batch submitted at each tick of `cron` read in `tz` (module doc)."""

    cron: str
    tz: str
    kind: str | None = None
    payload: Any = None
    tasks: list[ScheduledTask] = Field(default_factory=list, max_length=10_000)
    missed: Literal["skip", "run_last_once"] = "skip"
    grace_s: Annotated[float, Field(gt=0, le=86_400)] = DEFAULT_GRACE_S
    cap: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _readable(self) -> ScheduleLimits:
        cron_in(self.cron, self.tz)  # a ScheduleError is a ValueError: pydantic names the key
        if (self.kind is None) == (not self.tasks):
            raise ValueError("give either kind (one task per tick) or tasks (a batch)")
        if self.tasks and self.payload is not None:
            raise ValueError("payload goes with kind; each of tasks has its own")
        return self

    @property
    def every_tick(self) -> list[ScheduledTask]:
        """What each tick submits."""
        return self.tasks or [ScheduledTask(kind=self.kind or "", payload=self.payload)]
