"""What just happened, newest first: breaker moves, alerts, failures, timeouts, retries.

Shown when the terminal is wide enough for a third column: the room goes to a panel of
facts rather than to wider bars. The screen hands it as many rows as fit.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_alert_value, fmt_t
from tui.taskindex import HistoryRow
from tui.widgets.styling import BREAKER_LABELS, BREAKER_TONE, STATE_TONE, Panel, flow, tone


class EventsPanel(Panel):
    """Notable events up to the cursor (from the trace's events, once they are loaded)."""

    DEFAULT_CSS = """
    EventsPanel { height: 1fr; }
    """
    rows: reactive[tuple[HistoryRow, ...]] = reactive((), layout=False)
    known: reactive[bool] = reactive(True)
    #: What an empty list says once events are known (the task detail says "while it ran").
    quiet: reactive[str] = reactive("nothing notable yet")

    def on_mount(self) -> None:
        self.border_title = "events"

    def render(self) -> Text:
        width = max(1, self.text_width)
        if not self.rows:
            note = self.quiet if self.known else "once events are loaded"
            return Text(note, tone(self, "tf--dim"))
        out = [flow([Text(fmt_t(r.t), tone(self, "tf--dim")), *self._what(r)], width)
               for r in self.rows]
        text = Text("\n").join(out)
        lines = text.split("\n")
        return Text("\n").join(lines[: max(1, self.content_size.height)])

    def _what(self, r: HistoryRow) -> list[Text]:
        if r.kind == "breaker":
            dst = r.dst or ""
            label = BREAKER_LABELS.get(dst, dst.upper())
            return [Text(r.subject or "?", "bold"),
                    Text(label, tone(self, BREAKER_TONE.get(dst, "tf--dim")))]
        if r.kind == "alert":
            rule = r.subject or "?"
            firing = r.reason == "firing"
            return [Text.assemble(("● " if firing else "○ ",
                                   tone(self, "tf--bad" if firing else "tf--good")), rule),
                    Text(f"{r.reason} = {fmt_alert_value(rule, r.value)}",
                         tone(self, "tf--dim"))]
        state = r.dst or ""
        reason = r.reason or ""
        word = state if state != "PENDING" else "" if reason.startswith("retry") else "retry"
        return [Text(r.task_id or "?", tone(self, "tf--accent")),
                Text(word, tone(self, STATE_TONE.get(state, "tf--dim"))),
                Text(reason, tone(self, "tf--dim"))]
