"""The tasks running at the cursor, newest first: with a wide terminal, the room goes to rows
(which task, since when, on which worker, which attempt) rather than to wider bars."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_t
from tui.taskindex import TaskRow
from tui.widgets.styling import Panel, tone


class RunningPanel(Panel):
    """As many running tasks as fit; the border title says how many there are in all."""

    DEFAULT_CSS = """
    RunningPanel { height: 1fr; }
    """
    rows: reactive[tuple[TaskRow, ...]] = reactive((), layout=False)
    known: reactive[bool] = reactive(True)

    def on_mount(self) -> None:
        self.border_title = "running"

    def render(self) -> Table | Text:
        if not self.rows:
            note = "no task running" if self.known else "once events are loaded"
            return Text(note, tone(self, "tf--dim"))
        table = Table.grid(padding=(0, 1))
        for name in ("task", "since", "worker", "try"):
            table.add_column(name, no_wrap=True, justify="right" if name == "try" else "left")
        for r in self.rows[: max(1, self.content_size.height)]:
            table.add_row(Text(r.task_id, tone(self, "tf--accent")), fmt_t(r.since),
                          Text(r.worker or "", tone(self, "tf--dim")),
                          "" if r.attempt is None else str(r.attempt))
        return table
