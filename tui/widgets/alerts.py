"""The alerts firing at the cursor's time, since when, and their value in the rule's unit."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_alert_value, fmt_t
from tui.taskindex import AlertRow
from tui.widgets.styling import Panel, first_fit, flow, tone


class AlertPanel(Panel):
    """Names come from ALERT events; until those are loaded only the count is known.
    Exactly as tall as what it says: an empty alert list takes one line, not half a column."""

    DEFAULT_CSS = """
    AlertPanel { height: auto; }
    """
    alerts: reactive[tuple[AlertRow, ...]] = reactive((), layout=True)
    firing: reactive[int | None] = reactive(None, layout=True)
    known: reactive[bool] = reactive(True, layout=True)

    def on_mount(self) -> None:
        self.border_title = "alerts"

    def render(self) -> Text:
        width = max(1, self.text_width)
        if not self.known:
            n = "?" if self.firing is None else str(self.firing)
            return flow([Text(f"{n} firing", tone(self, "tf--warn")),
                         Text("(names once events are loaded)", tone(self, "tf--dim"))], width)
        if not self.alerts:
            return Text("no alerts firing", tone(self, "tf--good"))
        return Text("\n").join(self._line(a, width) for a in self.alerts)

    def _line(self, a: AlertRow, width: int) -> Text:
        name = Text.assemble(("● ", tone(self, "tf--bad")), a.rule)
        since, value = fmt_t(a.since), fmt_alert_value(a.rule, a.value)
        dim = tone(self, "tf--dim")
        return first_fit(
            [Text.assemble(name, (f"  since {since}  = {value}", dim)),
             Text.assemble(name, (f" {since} = {value}", dim))],
            width, [name, Text(f"since {since}", dim), Text(f"= {value}", dim)])
