"""The top line: play state, speed, the cursor's time on the run, and the source's health."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.model import PlayInfo, fmt_t
from tui.widgets.styling import Panel, tone


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
        speed = f"x{info.speed:g}"
        head = Text()
        head.append("▶ " if info.playing else "⏸ ", tone(self, "tf--accent"))
        head.append(f"{speed:<6}")
        head.append(f"{fmt_t(info.t)} / {fmt_t(t1)} ")
        tail = self._status(info)
        room = self.size.width - head.cell_len - tail.cell_len - 1
        if room >= 6:
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
        if info.loading:
            parts.append(f"loading events ({info.loading} frames) ", tone(self, "tf--warn"))
        if info.stalled_for is not None:
            parts.append(
                f"stalled since {fmt_t(info.span[1])} ({info.stalled_for:.0f}s no data)",
                tone(self, "tf--bad"),
            )
        elif info.follow and not info.complete:
            parts.append("LIVE" if info.live else "following", tone(self, "tf--good"))
        elif not info.complete:
            parts.append("incomplete", tone(self, "tf--warn"))
        else:
            parts.append(info.title, tone(self, "tf--dim"))
        return parts
