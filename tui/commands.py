"""What a `:` line asks for (k9s style): a view, a time on the run, a task, or quit.

Pure parsing, no I/O: the app decides what a task lookup finds (a task id opens its history,
a trace id its first task, a part of an id the task table filtered to it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

VIEWS = {"dash": "dashboard", "dashboard": "dashboard", "d": "dashboard",
         "tasks": "tasks", "t": "tasks", "help": "help", "h": "help", "?": "help"}
#: What `:` completes to as you type (Textual's suggester): views and time words.
WORDS = ("dashboard", "tasks", "help", "task ", "start", "end", "live", "quit")
_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:\.\d*)?)$")


@dataclass(frozen=True, slots=True)
class Command:
    """What a `:` line asks for: a view, a time, a task (id, trace id or part of one), or
    quit; `empty` when nothing was typed."""

    view: str | None = None
    t: float | None = None
    task: str | None = None
    quit: bool = False
    empty: bool = False


def parse_command(text: str, now: float, span: tuple[float, float]) -> Command:
    """A view name, a time (`90`, `1:30`, `+10`, `50%`), `task ID`, or else a task lookup."""
    s = text.strip()
    low = s.lower()
    if not s:
        return Command(empty=True)
    if low in ("q", "quit", "q!"):
        return Command(quit=True)
    if low in VIEWS:
        return Command(view=VIEWS[low])
    if low in ("start", "home", "begin"):
        return Command(t=span[0])
    if low in ("end", "live"):
        return Command(t=span[1])
    if low.startswith("task ") and s[5:].strip():
        return Command(task=s[5:].strip())
    t = parse_time(low, now, span)
    if t is not None:
        return Command(t=t)
    return Command(task=s)


def parse_time(s: str, now: float, span: tuple[float, float]) -> float | None:
    """`90`, `90s`, `1:30`, `1:02:03`, `5m`, `+10`/`-10` (relative), `50%` (of the run)."""
    s = s.strip().replace(" ", "")
    if not s:
        return None
    if s.endswith("%"):  # a share of the run: 0-100 (500% used to land on the end unsaid)
        try:
            share = float(s[:-1])
        except ValueError:
            return None
        return span[0] + (span[1] - span[0]) * share / 100.0 if 0 <= share <= 100 else None
    rel = s[0] in "+-"
    body = s[1:] if rel else s
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(body[-1:])
    try:
        if unit is not None:
            secs = float(body[:-1]) * unit
        elif m := _CLOCK.match(body):  # minutes and seconds below 60 (99:99 is no time)
            minutes, seconds = int(m.group(2)), float(m.group(3))
            if (m.group(1) is not None and minutes >= 60) or seconds >= 60:
                return None
            secs = int(m.group(1) or 0) * 3600 + minutes * 60 + seconds
        else:
            secs = float(body)
    except ValueError:
        return None
    if not math.isfinite(secs):
        return None
    if rel:
        return now + secs if s[0] == "+" else now - secs
    return secs
