"""The alerts firing at the cursor's time, and since when."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.model import AlertRow, fmt_t
from tui.widgets.styling import Panel, tone


class AlertPanel(Panel):
    """Names come from ALERT events; until those are loaded only the count is known."""

    DEFAULT_CSS = """
    AlertPanel { height: auto; }
    """
    alerts: reactive[tuple[AlertRow, ...]] = reactive((), layout=True)
    firing: reactive[int | None] = reactive(None, layout=True)
    known: reactive[bool] = reactive(True)

    def on_mount(self) -> None:
        self.border_title = "alerts"

    def render(self) -> Text:
        if not self.known:
            n = "?" if self.firing is None else str(self.firing)
            return Text(f"{n} firing (names once events are loaded)", tone(self, "tf--warn"))
        if not self.alerts:
            return Text("no alerts firing", tone(self, "tf--good"))
        out = Text()
        for k, a in enumerate(self.alerts):
            if k:
                out.append("\n")
            out.append("● ", tone(self, "tf--bad"))
            out.append(a.rule)
            out.append(f" {fmt_t(a.since)}", tone(self, "tf--dim"))
            if a.value is not None and self.content_size.width >= len(a.rule) + 20:
                out.append(f" ={a.value:g}", tone(self, "tf--dim"))
        return out
