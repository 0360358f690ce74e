"""Shared words and colours, so a breaker or a state looks the same in every panel.

Colours come from component classes styled in the app's .tcss with theme variables
($success, $warning, $error), so the light and the dark theme both stay readable.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Self

import numpy as np
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.widget import Widget

from tui.fmt import fmt_num, fmt_wait
from tui.trace_model import bars, fit

BREAKER_LABELS = {"closed": "CLOSED", "half_open": "HALF-OPEN", "open": "OPEN"}
#: Component classes every panel declares so the .tcss can colour them.
COMPONENTS = {
    "tf--good", "tf--warn", "tf--bad", "tf--dim", "tf--accent",
}
STATE_TONE = {
    "PENDING": "tf--accent", "RUNNING": "tf--warn", "SUCCESS": "tf--good",
    "FAILED": "tf--bad", "TIMEOUT": "tf--bad", "CANCELED": "tf--dim",
}
BREAKER_TONE = {"closed": "tf--good", "half_open": "tf--warn", "open": "tf--bad"}


def tone(widget: Widget, name: str) -> Style:
    """The rich style of a component class on `widget` (themed by the .tcss)."""
    return widget.get_component_rich_style(name, partial=True)


def breaker_text(widget: Widget, state: str | None, reopen_in: float | None = None,
                 short: bool = False) -> Text:
    """CLOSED / OPEN half-open in 12s / HALF-OPEN in the breaker's colour; "–" without one.

    An open breaker whose time to half-open is unknown (a live run without the sample) says
    so ("OPEN" alone) rather than guessing; `short` writes "OPEN ½ 12s" for tight rows.
    """
    if state is None:
        return Text("no breaker", tone(widget, "tf--dim"))
    label = BREAKER_LABELS.get(state, state.upper())
    text = Text(label, tone(widget, BREAKER_TONE.get(state, "tf--dim")) + Style(bold=True))
    if state == "open" and reopen_in is not None:
        wait = fmt_wait(reopen_in)
        text.append(f" ½ {wait}" if short else f" half-open in {wait}", tone(widget, "tf--dim"))
    return text


def flow(parts: Sequence[Text], width: int, indent: int = 2, sep: str = "  ") -> Text:
    """Pack `parts` into lines of at most `width` cells, in order, never cutting a part:
    a part that does not fit goes to the next line (indented); only a part wider than a
    whole line is folded. This is how every panel stays complete at 80x24."""
    lines: list[Text] = []
    line = Text()
    for part in parts:
        if not part.cell_len:
            continue
        gap = sep if line.cell_len else ""
        if line.cell_len and line.cell_len + len(gap) + part.cell_len > width:
            lines.append(line)
            line, gap = Text(" " * indent), ""
        line.append(gap)
        line.append_text(part)
    if line.cell_len:
        lines.append(line)
    out = Text()
    for ln in lines:
        pieces = ln.wrap(_CONSOLE, max(1, width), overflow="fold") if ln.cell_len > width \
            else [ln]
        for piece in pieces:
            if out.cell_len or len(out.plain):
                out.append("\n")
            out.append_text(piece)
    return out


def first_fit(candidates: Sequence[Text], width: int, fallback: Sequence[Text]) -> Text:
    """The first candidate line that fits `width` (most complete first), else `fallback`
    flowed over several lines."""
    for line in candidates:
        if line.cell_len <= width:
            return line
    return flow(fallback, width)


_CONSOLE = Console(width=1000, file=io.StringIO(), color_system=None)
CHART_LABEL = 5


def append_runs(out: Text, row: str, hot: np.ndarray, cold: Style, warm: Style) -> None:
    """Append a chart row, `warm` where `hot` and `cold` elsewhere, one span per run of
    equal style (a span per cell would cost a thousand style objects per frame)."""
    if not len(row):
        return
    cuts = np.flatnonzero(np.diff(hot.astype(np.int8))) + 1
    start = 0
    for end in [*cuts.tolist(), len(row)]:
        out.append(row[start:end], warm if hot[start] else cold)
        start = end


def chart(out: Text, widget: Widget, label: str, values: np.ndarray, width: int, rows: int,
          style: str) -> None:
    """A small history chart under a row of numbers: `label` and its peak on the left.
    Nothing is drawn while the series has been zero or empty all run (no blank rows)."""
    finite = values[~np.isnan(values)]
    if not len(finite) or not finite.max() > 0:
        return
    for k, row in enumerate(bars(fit(values, max(1, width - CHART_LABEL)), rows)):
        tag = label if k == rows - 1 else (fmt_num(float(finite.max())) if k == 0 else "")
        out.append("\n" + f"{tag:<{CHART_LABEL}}"[:CHART_LABEL], tone(widget, "tf--dim"))
        out.append(row, tone(widget, style))


class Panel(Widget):
    """A bordered panel with the shared component classes.

    Its height is its content's, and its content flows to its width: a panel lays its text
    out at `text_width`, which is the width the layout asks about while it measures the
    height, and the panel's own width when it draws. Reading the panel's current width while
    measuring gave the height of the last width (and the layout caches it per width): a panel
    that grew by a chart or a narrower screen kept one line for three until its next resize.

    Textual keys a widget's measured box by a layout generation that it advances only when
    no layout of the widget is pending. When a sibling's layout runs between two changes of
    this panel (the first pending, the second arriving before this panel's idle turn), the
    box measured for the first change is cached under the generation the second one reuses,
    and the panel keeps the old height until something else moves: one line for three,
    seen on a loaded machine. `refresh` advances the generation for every layout change.
    """

    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = """
    Panel { height: auto; }
    """
    _measuring: int | None = None

    @property
    def text_width(self) -> int:
        """The width to lay the text out at (see the class's docstring)."""
        return self._measuring if self._measuring is not None else self.content_size.width

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if layout and self._layout_required:
            self._layout_updates += 1  # see the class docstring: Textual skips this bump
        super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        return self

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._measuring = width
        try:
            return super().get_content_height(container, viewport, width)
        finally:
            self._measuring = None
