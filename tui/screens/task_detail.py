"""The drill-down: one task's whole history, scrolled like a log.

From `WIDE` columns a second column lists what else happened while the task lived (breaker
moves, alerts, other tasks' failures and retries, from its submit to its end or the cursor):
the room goes to the context an on-call engineer asks next, not to a wider table.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll

from tui.fmt import fmt_t
from tui.screens.base import MonitorScreen
from tui.screens.dashboard import WIDE
from tui.taskindex import TaskHistory
from tui.trace_model import TraceModel
from tui.widgets.events import EventsPanel
from tui.widgets.history import HistoryView

#: States after which a task's story is over (its window of events ends there).
ENDED = frozenset({"SUCCESS", "FAILED", "TIMEOUT", "CANCELED"})


class TaskDetailScreen(MonitorScreen):
    """Esc goes back to the table; the cursor still moves the history (future events hide)."""

    AUTO_FOCUS = "#history-scroll"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.back", "back")]
    DEFAULT_CSS = """
    #detail { height: 1fr; }
    #detail > #history-scroll { width: 1fr; }
    #detail > EventsPanel { display: none; width: 1fr; }
    TaskDetailScreen.-wide #detail > EventsPanel { display: block; }
    """

    def __init__(self, model: TraceModel, task_id: str) -> None:
        super().__init__(model)
        self.task_id = task_id

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="detail"):
            with VerticalScroll(id="history-scroll"):
                yield HistoryView()
            yield EventsPanel()

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")
        self.call_after_refresh(self.show)

    def show(self) -> None:
        if not self.is_mounted:
            return
        view = self.query_one(HistoryView)
        view.missing = f"no task {self.task_id!r} in this trace"
        view.history = self.model.tasks.history(self.task_id, self.t)
        if self.has_class("-wide"):
            self._show_around(view.history)

    def _show_around(self, h: TaskHistory | None) -> None:
        """The notable events from the task's first event to its end (or the cursor)."""
        panel = self.query_one(EventsPanel)
        if h is None or not h.rows:
            panel.border_title, panel.quiet, panel.rows = "events", "not submitted yet", ()
            return
        start = h.rows[0].t
        end = h.rows[-1].t if h.state in ENDED else self.t
        tasks = self.model.tasks
        panel.known = self.model.final_at(self.t)
        panel.quiet = f"nothing notable while {self.task_id} lived"
        panel.border_title = (f"events {fmt_t(start)}–{fmt_t(end)}: "
                              f"{tasks.n_notable(end, start)}")
        panel.rows = tuple(tasks.notable(end, max(1, panel.content_size.height), start))
