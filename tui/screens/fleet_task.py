"""One looked-up task (or every task of a trace) as the store has it: its record, and its
history: what the record's timestamps tell, plus every change the polls have seen since.

From `WIDE` columns a second column shows the worker process the (first) task ran on, as
the worker view has it, and every task RUNNING on that process now."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Static

from tui.fleet import FleetModel, Watched, ago, running_rows, task_lines
from tui.screens.fleet import WIDE, FleetBase
from tui.widgets.fleet import WorkerPanel


class FleetTaskScreen(FleetBase):
    """Refreshed after every poll while open (the app re-reads the watched tasks)."""

    AUTO_FOCUS = "#history-scroll"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.back", "back")]
    DEFAULT_CSS = """
    FleetTaskScreen #history-scroll {
        border: round $primary 50%; border-title-color: $text-primary; width: 1fr;
    }
    #fleet-detail { height: 1fr; }
    #fleet-detail > WorkerPanel { display: none; width: 1fr; border: round $primary 50%;
                                  border-title-color: $text-primary; padding: 0 1; }
    FleetTaskScreen.-wide #fleet-detail > WorkerPanel { display: block; }
    """

    def __init__(self, model: FleetModel, watched: Watched) -> None:
        super().__init__(model)
        self.watched = watched

    @property
    def query_text(self) -> str:
        return self.watched.query

    @property
    def found(self) -> list[list[tuple[str, str]]]:
        """Each task's record as (label, value) lines (what the tests read)."""
        return [task_lines(t, self.watched.t) for t in self.watched.tasks.values()]

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="fleet-detail"):
            with VerticalScroll(id="history-scroll"):
                yield Static(id="fleet-task")
            yield WorkerPanel()

    def on_mount(self) -> None:
        n = len(self.watched.tasks)
        self.query_one("#history-scroll").border_title = \
            f"{self.watched.query}: {n} task{'s' if n != 1 else ''}"
        self.show_body()

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")
        self.call_after_refresh(self.show_body)

    def show_body(self) -> None:
        now = self.watched.t
        parts: list[Table | Text] = []
        for task_id, task in self.watched.tasks.items():
            record = Table.grid(padding=(0, 2))
            record.add_column(style="bold", no_wrap=True)
            record.add_column()
            record.add_column(style="bold", no_wrap=True)
            record.add_column()
            lines = task_lines(task, now)
            half = (len(lines) + 1) // 2
            right = [*lines[half:], ("", "")][:half]
            for a, b in zip(lines[:half], right, strict=True):
                record.add_row(*a, *b)
            history = Table(box=None, padding=(0, 1), show_edge=False, title="history",
                            title_justify="left", title_style="bold")
            history.add_column("when", no_wrap=True, style="dim")
            history.add_column("what")
            for line in self.watched.history(task_id):
                what = Text(line.what, "yellow" if line.seen else "")
                history.add_row("" if line.t is None else ago(line.t, now), what)
            parts += [record, Text(""), history, Text("")]
        self.query_one("#fleet-task", Static).update(Group(*parts))
        if self.has_class("-wide"):
            self._show_worker()

    def _show_worker(self) -> None:
        panel = self.query_one(WorkerPanel)
        ids = [t.worker_id for t in self.watched.tasks.values() if t.worker_id]
        latest, workers = self.model.latest, self.model.workers
        if not ids or latest is None:
            panel.worker, panel.note = None, "no worker has run it yet"
            return
        process = ids[0].rpartition("/")[0]
        row = next((w for w in workers or () if w.process == process), None)
        panel.border_title = f"its worker {process}"
        panel.note = f"{process}: not in the last worker poll"
        panel.now = latest.t
        panel.running = tuple(r for r in running_rows(latest)
                              if (r.worker or "").rpartition("/")[0] == process)
        panel.worker = row
