"""The top line: play state, the cursor's time on the run, how the source is doing, and what
the run is.

One indicator, three states, the same on every screen: `● LIVE` while the cursor rides the
end of a followed run, `▶ x2` while replaying at a speed, `⏸ x2` when stopped. Space always
moves between them, and what it shows is what the cursor does. A followed run that wrote
its footer is over: at its end the indicator reads `■ ENDED`, never LIVE.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_pct, fmt_t, fmt_wait
from tui.trace_model import PlayInfo
from tui.widgets.styling import Panel, tone

MIN_BAR = 6


def play_label(info: PlayInfo) -> str:
    """`● LIVE` (`■ ENDED` once the run wrote its footer), `▶ x2` or `⏸ x2`: what the
    cursor is doing."""
    if info.live:
        return "■ ENDED" if info.complete else "● LIVE"
    return f"{'▶' if info.playing else '⏸'} x{info.speed:g}"


class TimeBar(Panel):
    """Renders a `PlayInfo`; clicking or dragging is left to the keys (k9s/htop style)."""

    DEFAULT_CSS = """
    TimeBar { height: 1; dock: top; }
    """
    info: reactive[PlayInfo | None] = reactive(None, layout=False)

    def render(self) -> Text:
        info = self.info
        if info is None:
            return Text("")
        t0, t1 = info.span
        head = Text()
        label = play_label(info)
        live = info.live and not info.complete
        head.append(f"{label:<7}", tone(self, "tf--good" if live else "tf--accent"))
        head.append(f" {fmt_t(info.t)} / {fmt_t(t1)} ")
        status, title = self._status(info), Text(info.title, tone(self, "tf--dim"))
        width = self.size.width
        short = Text(info.title.split(" on ")[0], tone(self, "tf--dim"))  # without the worker
        tail = Text()
        for candidate in ([status, title], [status, short], [status]):
            tail = Text(" ").join([p for p in candidate if p.cell_len])
            if head.cell_len + tail.cell_len + 1 + MIN_BAR <= width:
                break
        room = width - head.cell_len - tail.cell_len - 1
        if room >= MIN_BAR:
            frac = 0.0 if t1 <= t0 else min(1.0, max(0.0, (info.t - t0) / (t1 - t0)))
            done = round(frac * room)
            head.append("━" * done, tone(self, "tf--accent"))
            head.append("─" * (room - done), tone(self, "tf--dim"))
            head.append(" ")
        head.append_text(tail)
        return head

    def _status(self, info: PlayInfo) -> Text:
        if info.error:
            return Text(f"error: {info.error}", tone(self, "tf--bad"))
        parts = Text()
        if info.loaded < 1.0:
            parts.append(f"loading {fmt_pct(info.loaded)} ", tone(self, "tf--warn"))
        if info.stalled_for is not None:
            parts.append(f"stalled since {fmt_t(info.span[1])} "
                         f"({fmt_wait(info.stalled_for)} no data)", tone(self, "tf--bad"))
        elif info.follow and not info.complete and not info.live:
            behind = max(0.0, info.span[1] - info.t)
            parts.append(f"following, {fmt_wait(behind)} behind", tone(self, "tf--good"))
        elif not info.complete and not info.follow:
            parts.append("incomplete", tone(self, "tf--warn"))
        parts.rstrip()
        return parts
