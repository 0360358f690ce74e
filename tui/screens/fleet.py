"""The fleet view's screens: the live board of a whole store, and one looked-up task.

The app owns the data and sets `model` polls and `status` on the board; the board only
pushes them into its widgets, like the trace monitor's screens do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.fleet import FleetModel, running_rows
from tui.widgets.batches import BatchPanel
from tui.widgets.commandbar import CommandBar
from tui.widgets.fleet import FleetBar, FleetStatus, RunningTable, StatesPanel
from tui.widgets.overview import OverviewPanel


class FleetScreen(Screen[None]):
    """Left: queue and running over time, counts by state. Right: the RUNNING tasks.
    Below, full width so each batch's status fits: per-batch progress."""

    AUTO_FOCUS = "RunningTable"
    DEFAULT_CSS = """
    #fleet { height: 1fr; }
    .fleet-col { width: 1fr; height: 1fr; }
    StatesPanel { border: round $primary 50%; border-title-color: $text-primary; padding: 0 1; }
    RunningTable { height: 1fr; }
    FleetScreen BatchPanel { max-height: 40%; overflow-y: auto; }
    """

    def __init__(self, model: FleetModel) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        yield FleetBar()
        with Horizontal(id="fleet"):
            with Vertical(classes="fleet-col"):
                yield OverviewPanel()
                yield StatesPanel()
            yield RunningTable(classes="fleet-col")
        yield BatchPanel()
        yield CommandBar()
        yield Footer()

    def show(self, status: FleetStatus) -> None:
        """Push the latest poll (and the source's health) down into the widgets."""
        if not self.is_mounted:
            return
        self.query_one(FleetBar).status = status
        latest = self.model.latest
        if latest is None:
            return
        self.query_one(OverviewPanel).data = self.model.overview()
        self.query_one(StatesPanel).counts = latest.counts
        self.query_one(BatchPanel).rows = latest.batches
        self.query_one(RunningTable).show(running_rows(latest))

    def open_prompt(self, mode: str, text: str = "") -> None:
        self.query_one(CommandBar).open(mode, text)


class FleetTaskScreen(Screen[None]):
    """The tasks a lookup found (a trace_id may name several), as the store has them now."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, query: str, found: Sequence[list[tuple[str, str]]]) -> None:
        super().__init__()
        self.query_text = query
        self.found = list(found)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="history-scroll"):
            for lines in self.found:
                table = Table(box=None, show_header=False, padding=(0, 2))
                table.add_column(style="bold")
                table.add_column()
                for label, value in lines:
                    table.add_row(label, value)
                yield Static(table, classes="fleet-task")
        yield Footer()

    def on_mount(self) -> None:
        n = len(self.found)
        self.title = f"{self.query_text}: {n} task{'s' if n != 1 else ''}"
