"""How the monitor writes numbers: short, exact where it matters, the same in every panel.

Every function takes the value carried in the trace (or the store) and answers a string;
nothing here reads a clock. "–" means "no value" everywhere.
"""

from __future__ import annotations

import math

from rich.text import Text

DASH = "–"


def fmt_t(t: float | None) -> str:
    """A trace time as h:mm:ss.s (or m:ss.s) — what a person types back into `:`."""
    if t is None or math.isnan(t):
        return DASH
    sign = "-" if t < 0 else ""
    t = abs(t)
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{sign}{int(h)}:{int(m):02d}:{s:04.1f}"
    return f"{sign}{int(m)}:{s:04.1f}"


def fmt_num(x: float | None, digits: int = 0) -> str:
    """A count or level in at most ~5 cells: 812, 1346, 22.5k, 225k, 1.00M."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    a = abs(x)
    if a >= 999_500:
        return f"{x / 1e6:.2f}M"
    if a >= 99_950:
        return f"{x / 1e3:.0f}k"
    if a >= 10_000:
        return f"{x / 1e3:.1f}k"
    return f"{x:.{digits}f}"


def fmt_count(n: int) -> str:
    """An exact count with thousands separators (1,000,000): for headers with room."""
    return f"{n:,}"


#: Control characters (C0, DEL, C1) shown as their escape instead of sent to the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def safe_text(name: str | None) -> Text:
    """A name from a run (task id, kind, batch id, worker, reason) as the terminal may show
    it: never Rich markup (`[red]` stays text) and never an escape sequence (ESC shows as
    the four characters `\x1b`): names come from whoever submitted the tasks."""
    return Text((name or "").translate(_CONTROLS))


def fmt_many(n: int, word: str) -> str:
    """`1 task`, `2 tasks`, `1,200 processes`: a count and its noun, plural-correct."""
    plural = word + ("es" if word.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{fmt_count(n)} {word if n == 1 else plural}"


def fmt_s(x: float | None) -> str:
    """Seconds, short: 30s, 2.5s, 120ms."""
    if x is None or math.isnan(x):
        return DASH
    if x < 1:
        return f"{x * 1000:.0f}ms"
    return f"{x:.1f}s" if x < 100 else f"{x:.0f}s"


def fmt_wait(x: float | None) -> str:
    """A countdown or an age in whole units: 9s, 2m05s, 1h02m."""
    if x is None or math.isnan(x):
        return DASH
    s = max(0, math.ceil(x - 1e-9))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_pct(x: float | None, digits: int = 0) -> str:
    if x is None or math.isnan(x):
        return DASH
    return f"{x * 100:.{digits}f}%"


def fmt_alert_value(rule: str, value: float | None) -> str:
    """An alert's value in its rule's unit: 62.0% for a rate, x3.8 for a p99 over its
    history, 812 for a depth or a count (the trace carries the raw float)."""
    if value is None or math.isnan(value):
        return DASH
    name = rule.lower()
    if "rate" in name or ("ratio" in name and "p99" not in name):
        return fmt_pct(value, 1)
    if "p99" in name or "ratio" in name:
        return f"x{value:.2g}" if value < 10 else f"x{value:.0f}"
    if abs(value - round(value)) < 1e-9:
        return fmt_num(round(value))
    return f"{value:.3g}"
