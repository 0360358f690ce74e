"""The fleet view's board: queue and running over the last polls, counts by state, the
workers in brief, every batch with its p99, and the RUNNING tasks.

The app owns the data and calls `show(status)` after every poll; screens only push it into
their widgets, like the trace monitor's screens do. `FleetBase` is what the fleet's screens
share: the status line on top, the prompt and the key footer below.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer

from tui.fleet import FleetModel, running_rows
from tui.messages import SortChanged
from tui.widgets.batches import BatchPanel
from tui.widgets.commandbar import CommandBar
from tui.widgets.fleet import (
    FleetBar,
    FleetStatus,
    RunningTable,
    StatesPanel,
    WorkersSummary,
    WorkersTable,
)
from tui.widgets.overview import OverviewPanel

#: The fleet's `/` looks in more than the replay's (the store holds every name of a task).
SEARCH_HINT = "part of a task id, trace, kind, batch or key"
#: From this many columns the board lists every worker process beside the queue chart.
WIDE = 150


class FleetBase(Screen[None]):
    """Status line, body, prompt, footer."""

    DEFAULT_CSS = """
    FleetBase #bottom { dock: bottom; height: auto; }
    FleetBase #bottom > Footer { dock: none; }
    """

    def __init__(self, model: FleetModel) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        yield FleetBar()
        yield from self.compose_body()
        with Vertical(id="bottom"):
            yield CommandBar()
            yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def show(self, status: FleetStatus) -> None:
        """Push the latest poll (and the source's health) down into the widgets."""
        if self.is_mounted:
            self.query_one(FleetBar).status = status
            self.show_body()

    def show_status(self, status: FleetStatus) -> None:
        """Only the status line (a poll that changed nothing else)."""
        if self.is_mounted:
            self.query_one(FleetBar).status = status

    def show_body(self) -> None:
        """Push the model's latest poll into this screen's own widgets."""

    def open_prompt(self, mode: str, text: str = "") -> None:
        bar = self.query_one(CommandBar)
        bar.open(mode, text)
        if mode == "/":
            bar.entry.placeholder = SEARCH_HINT

    def show_search(self, summary: str, miss: bool = False) -> None:
        """What the search typed so far finds ("3 tasks", "100+ tasks", "no match")."""
        bar = self.query_one(CommandBar)
        if bar.is_open and bar.mode == "/":
            bar.show_info(summary, miss)


class FleetScreen(FleetBase):
    """Top: queue and running over time | counts by state and the workers in brief (from
    `WIDE` columns, and in full: one row per process, as `w` shows them). Then every batch,
    full width so its status and p99 fit; then the RUNNING tasks."""

    AUTO_FOCUS = "RunningTable"
    DEFAULT_CSS = """
    #fleet-top { height: 2fr; min-height: 8; }
    #fleet-top > OverviewPanel { width: 1fr; height: 1fr; }
    #fleet-side { width: 1fr; height: 1fr; }
    #fleet-side > WorkersTable { display: none; height: 1fr; border: round $primary 50%;
                                 border-title-color: $text-primary; }
    FleetScreen.-wide #fleet-side > WorkersTable { display: block; }
    RunningTable { height: 3fr; min-height: 4; border: round $primary 50%;
                   border-title-color: $text-primary; }
    """

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="fleet-top"):
            yield OverviewPanel()
            with Vertical(id="fleet-side"):
                yield StatesPanel()
                yield WorkersSummary()
                yield WorkersTable()
        yield BatchPanel()
        yield RunningTable()

    def on_mount(self) -> None:
        self.query_one(OverviewPanel).border_title = "queue · running (10 min)"
        self.query_one(BatchPanel).empty_text = "no batches in this store"

    def on_resize(self) -> None:
        self.query_one(BatchPanel).max_lines = max(2, (self.size.height - 12) // 3)
        self.set_class(self.size.width >= WIDE, "-wide")
        self.show_body()

    def show_body(self, follow: str | None = None) -> None:
        latest = self.model.latest
        if latest is None:
            return
        self.query_one(OverviewPanel).data = self.model.overview()
        self.query_one(StatesPanel).counts = latest.counts
        summary = self.query_one(WorkersSummary)
        summary.now, summary.threads, summary.rows = (
            latest.t, self.model.threads, self.model.workers)
        if self.has_class("-wide") and self.model.workers is not None:
            workers = self.query_one(WorkersTable)
            workers.border_title = f"processes {len(self.model.workers)}"
            workers.show(self.model.workers, latest.t)
        self.query_one(BatchPanel).rows = latest.batches
        table = self.query_one(RunningTable)
        table.border_title = f"running {len(latest.running)} · {table.sort_text}"
        table.show(table.ordered(running_rows(latest)),
                   follow=follow or table.highlighted_task)

    @on(SortChanged)
    def _sorted(self, message: SortChanged) -> None:
        message.stop()
        self.show_body(follow=message.task)
