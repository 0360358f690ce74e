"""A schedule as an arrival process: a group of a batch's tasks at each tick of a cron
expression, in virtual time.

Virtual time 0 is the wall-clock instant `arrival.origin` (an ISO time with its offset), so
"0 2 * * *" in Europe/Paris lands 7,200 s into a run whose origin is midnight in Paris, and a
DST change inside the run moves the ticks exactly as it moves a worker's
(`taskfuse.core.ticks`: the runtime's schedule role walks the same ticks). Each tick brings
`per_tick` tasks until the batch's `count` is reached or the horizon ends. A load test run
at `--time-scale F` reads the cron's clock F times as fast (`tick_scale`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from taskfuse.core.ticks import ticks
from taskfuse.limits.schedules import cron_in


def origin_of(text: str) -> float:
    """The epoch time of an ISO time that carries its offset (ValueError otherwise)."""
    at = datetime.fromisoformat(text)
    if at.tzinfo is None:
        raise ValueError(f"origin {text!r} needs an offset (e.g. 2026-12-01T00:00:00+01:00)")
    return at.timestamp()


def check_cron_arrival(cron: str | None, tz: str | None, origin: str | None) -> None:
    """A cron arrival's keys, checked when the scenario is read (ValueError names what)."""
    if cron is None or tz is None or origin is None:
        raise ValueError("a cron arrival needs cron, tz and origin (the wall-clock time of "
                         "virtual time 0)")
    cron_in(cron, tz)
    origin_of(origin)


def cron_arrivals(arrival: Any, count: int, horizon_s: float) -> Iterator[tuple[float, int, int]]:
    """`(time, first, end)` groups: tasks `first..end-1` arrive at a tick (virtual time)."""
    origin, scale = origin_of(arrival.origin), arrival.tick_scale
    cron = cron_in(arrival.cron, arrival.tz)
    first = 0
    for tick in ticks(cron, origin + arrival.start_s / scale - 1e-6,
                      origin + horizon_s / scale):
        if first >= count:
            return
        end = min(count, first + arrival.per_tick)
        yield (tick - origin) * scale, first, end
        first = end
