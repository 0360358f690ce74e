"""One task's whole history: attempts, waits, errors, every event up to the cursor."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from tui.model import fmt_s, fmt_t
from tui.taskindex import TaskHistory
from tui.widgets.styling import COMPONENTS, STATE_TONE, tone


class HistoryView(Widget):
    """A summary line and the event list; events after the cursor are not shown yet."""

    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = """
    HistoryView { height: auto; }
    """
    history: reactive[TaskHistory | None] = reactive(None, layout=True)
    missing: reactive[str] = reactive("")

    def render(self) -> Table | Text:
        h = self.history
        if h is None:
            return Text(self.missing or "no task", tone(self, "tf--warn"))
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False,
                      title=self._summary(h), title_justify="left")
        for name in ("time", "event", "move", "try", "worker", "detail"):
            table.add_column(name, no_wrap=name != "detail")
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
        return table

    def _summary(self, h: TaskHistory) -> Text:
        out = Text(h.task_id, tone(self, "tf--accent"))
        out.append(f"  trace {h.trace_id or '–'}  batch {h.batch_id or '–'}  ")
        out.append(h.state or "not yet submitted", tone(self, STATE_TONE.get(h.state or "",
                                                                             "tf--dim")))
        out.append(f"\nattempts {h.attempts}  queued {fmt_s(h.queued_s)}  "
                   f"running {fmt_s(h.running_s)}  waited {fmt_s(h.waited_s)}")
        if h.errors:
            out.append("\nerrors: ", tone(self, "tf--bad"))
            out.append("; ".join(h.errors))
        return out
