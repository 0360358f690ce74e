"""One task's whole history: attempts, waits, errors, every event up to the cursor."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from tui.fmt import fmt_s, fmt_t
from tui.taskindex import TaskHistory
from tui.widgets.styling import COMPONENTS, STATE_TONE, flow, tone


class HistoryView(Widget):
    """A summary and the event list; events after the cursor are not shown yet."""

    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = """
    HistoryView { height: auto; }
    """
    history: reactive[TaskHistory | None] = reactive(None, layout=True)
    missing: reactive[str] = reactive("")

    def render(self) -> Group | Text:
        h = self.history
        if h is None:
            return Text(self.missing or "no task", tone(self, "tf--warn"))
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
        for name in ("time", "event", "move", "try", "worker", "detail"):
            table.add_column(name, no_wrap=name != "detail", ratio=1 if name == "detail"
                             else None)
        for r in h.rows:
            move = ""
            if r.dst is not None:
                move = f"{r.src or '·'} → {r.dst}"
            detail = " ".join(x for x in (r.subject, r.reason) if x)
            if r.kind in ("wait", "call") and r.value is not None:
                detail += f" {fmt_s(r.value)}"
            style = tone(self, STATE_TONE.get(r.dst or "", "tf--dim"))
            table.add_row(fmt_t(r.t), r.kind, Text(move, style),
                          "" if r.attempt is None else str(r.attempt), r.worker or "", detail)
        return Group(self._summary(h), Text(""), table)

    def _summary(self, h: TaskHistory) -> Text:
        width = max(20, self.content_size.width)
        state = Text(h.state or "not yet submitted",
                     tone(self, STATE_TONE.get(h.state or "", "tf--dim")))
        out = flow([Text(h.task_id, tone(self, "tf--accent")), state,
                    Text(f"trace {h.trace_id or '–'}"), Text(f"batch {h.batch_id or '–'}")],
                   width)
        out.append("\n")
        out.append_text(flow([Text(f"attempts {h.attempts}"), Text(f"queued {fmt_s(h.queued_s)}"),
                              Text(f"running {fmt_s(h.running_s)}"),
                              Text(f"waited {fmt_s(h.waited_s)}")], width))
        if h.errors:
            out.append("\n")
            out.append_text(flow([Text("errors:", tone(self, "tf--bad")),
                                  *(Text(e + ";") for e in h.errors[:-1]),
                                  Text(h.errors[-1])], width, sep=" "))
        return out
