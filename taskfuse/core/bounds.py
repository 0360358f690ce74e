"""The bounds of every duration and count a person can write: one definition, used by the
API (`TaskSpec`, `App.task`), the command line's flags, limits files and scenarios.

Why bounds and not just "> 0": a number is passed on to places that do arithmetic with it.
A timeout of 1e308 overflows `2 * timeout` in PostgreSQL (every sweeper pass then fails); NaN
passes `timeout <= 0` and makes the watchdog's wait 0 (a busy loop, and a task that can never
time out); a heartbeat of 1e-9 s is a transaction loop; `True` is an int to Python and ran a
worker with one thread. So a duration is a finite real between `MIN_DURATION_S` and
`MAX_DURATION_S`, a period that drives a loop (heartbeat, watchdog, sweeper) is at least
`MIN_PERIOD_S`, and a count is a real int (never a bool) within its stated maximum; an integer
stored in a database column is within 64 bits.
"""

from __future__ import annotations

import math

#: The shortest duration (timeouts, waits, leases): one millisecond.
MIN_DURATION_S = 0.001
#: The longest duration: thirty days.
MAX_DURATION_S = 30 * 86_400.0
#: The shortest period of a loop that touches the store (heartbeat, watchdog, sweeper).
MIN_PERIOD_S = 0.01
#: The smallest positive number (a rate, a mean, a factor) a person may write: a millionth.
#: Below it a "positive" number is zero by mistake (1e-300 per second is never).
MIN_POSITIVE = 1e-6
#: Retries a task may be given.
MAX_RETRY = 1_000
#: Integers a store keeps in a 64-bit column (priority).
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1


class BoundError(ValueError):
    """A number outside its stated bounds; the message names it, its value and the bounds."""


def is_real(value: object) -> bool:
    """An int or float that is finite and not a bool (True is 1 to Python, not to a person)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and (isinstance(value, int) or math.isfinite(value)))


def duration(name: str, value: object, low: float = MIN_DURATION_S,
             high: float = MAX_DURATION_S) -> float:
    """`value` as seconds, or BoundError: finite, between `low` and `high` inclusive."""
    if not is_real(value) or not low <= float(value) <= high:  # type: ignore[arg-type]
        raise BoundError(f"{name} must be a number of seconds from {low:g} to {high:g}, "
                         f"got {_shown(value)}")
    return float(value)  # type: ignore[arg-type]


def count(name: str, value: object, low: int = 0, high: int = MAX_INT64) -> int:
    """`value` as an int, or BoundError: an int (not a bool) between `low` and `high`."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BoundError(f"{name} must be a whole number from {low} to {high}, "
                         f"got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    """The bad value, short: a 5,000-digit integer is named by its size, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
