"""The fleet's worker view (Flower has one; so do we): every worker process the store knows
of (its beats, and the tasks it holds), its threads, how many are busy, its latest
heartbeat, the attempts it ended and those that failed."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType

from tui.fleet import LIVE_S
from tui.fmt import fmt_many
from tui.screens.fleet import FleetBase
from tui.widgets.fleet import WorkersTable


class FleetWorkersScreen(FleetBase):
    """A table of processes, busiest first; esc or b goes back to the board."""

    AUTO_FOCUS = "WorkersTable"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.back", "back")]
    DEFAULT_CSS = """
    WorkersTable { height: 1fr; border: round $primary 50%; border-title-color: $text-primary; }
    """

    def compose_body(self) -> ComposeResult:
        yield WorkersTable()

    def show_body(self) -> None:
        table = self.query_one(WorkersTable)
        rows, latest = self.model.workers, self.model.latest
        if rows is None or latest is None:
            table.border_title = "workers: not polled yet"
            return
        threads = self.model.threads
        table.border_title = (
            f"workers: {fmt_many(len(rows), 'process')}, "
            f"{fmt_many(sum(w.threads for w in rows), 'thread')} seen, "
            f"{threads or 0} live (active within {LIVE_S:.0f}s), "
            f"{sum(w.busy for w in rows)} busy")
        table.show(rows, latest.t)
