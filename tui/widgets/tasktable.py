"""The task table: tasks in a state at the cursor's time, newest change first."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from tui.messages import TaskChosen
from tui.model import fmt_t
from tui.taskindex import TaskRow
from tui.widgets.styling import COMPONENTS, STATE_TONE, tone

COLUMNS = ("task", "state", "since", "try", "batch", "trace", "worker", "last reason")


class TaskTable(DataTable[object]):
    """Shows the rows it is given (data down); enter posts `TaskChosen` (events up)."""

    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | COMPONENTS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "choose", "history", show=True)]

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name in COLUMNS:
            self.add_column(name, key=name)

    def show(self, rows: list[TaskRow]) -> None:
        """Replace the rows, keeping the highlighted task when it is still listed."""
        keep = self.highlighted_task
        self.clear()
        for r in rows:
            state = Text(r.state, tone(self, STATE_TONE.get(r.state, "tf--dim")))
            self.add_row(
                r.task_id, state, fmt_t(r.since), "" if r.attempt is None else str(r.attempt),
                r.batch_id or "", r.trace_id or "", r.worker or "", r.reason or "",
                key=r.task_id,
            )
        if keep is not None and keep in self.rows:
            self.move_cursor(row=self.get_row_index(keep))

    @property
    def highlighted_task(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return None if key.value is None else str(key.value)

    def action_choose(self) -> None:
        task = self.highlighted_task
        if task is not None:
            self.post_message(TaskChosen(task))
