"""The drill-down: one task's whole history, scrolled like a log."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll

from tui.model import TraceModel
from tui.screens.base import MonitorScreen
from tui.widgets.history import HistoryView


class TaskDetailScreen(MonitorScreen):
    """Esc goes back to the table; the cursor still moves the history (future events hide)."""

    AUTO_FOCUS = "#history-scroll"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.back", "back")]

    def __init__(self, model: TraceModel, task_id: str) -> None:
        super().__init__(model)
        self.task_id = task_id

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="history-scroll"):
            yield HistoryView()

    def show(self) -> None:
        view = self.query_one(HistoryView)
        view.missing = f"no task {self.task_id!r} in this trace"
        view.history = self.model.tasks.history(self.task_id, self.t)
