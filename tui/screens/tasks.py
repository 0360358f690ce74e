"""The task view: a table of tasks by state at the cursor's time, filterable and searchable."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Static

from tui.screens.base import MonitorScreen
from tui.taskindex import STATES
from tui.widgets.styling import STATE_TONE
from tui.widgets.tasktable import TaskTable

#: Rows shown at most; the header says how many match, narrow with a state or `/`.
ROW_LIMIT = 300


class TasksScreen(MonitorScreen):
    """State filter on 0-6 (0 = all), like htop's sort/filter keys; `/` searches."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("0", "state(0)", "all", show=False),
        *(Binding(str(k + 1), f"state({k + 1})", s.lower(), show=False)
          for k, s in enumerate(STATES)),
        Binding("s", "cycle_state", "state"),
    ]
    AUTO_FOCUS = "#task-table"
    state: reactive[str | None] = reactive(None, init=False)
    query_text: reactive[str] = reactive("", init=False)

    def compose_body(self) -> ComposeResult:
        yield Static(id="task-filter")
        yield TaskTable(id="task-table")

    def watch_state(self) -> None:
        self.show()

    def watch_query_text(self) -> None:
        self.show()

    def action_state(self, k: int) -> None:
        self.state = None if k == 0 else STATES[k - 1]

    def action_cycle_state(self) -> None:
        order = [None, *STATES]
        self.state = order[(order.index(self.state) + 1) % len(order)]

    def show(self) -> None:
        if not self.is_mounted:
            return
        tasks = self.model.tasks
        rows, total = tasks.tasks_at(self.t, self.state, self.query_text, ROW_LIMIT)
        self.query_one(TaskTable).show(rows)
        self.query_one("#task-filter", Static).update(self._header(total, len(rows)))

    def _header(self, total: int, shown: int) -> Text:
        counts = self.model.tasks.counts_at(self.t)
        out = Text()
        out.append(f"[0]all {sum(counts.values())}", "reverse" if self.state is None else "")
        out.append(" ")
        for k, s in enumerate(STATES):
            label = f"[{k + 1}]{s.lower()} {counts[s]}"
            out.append(label, "reverse" if self.state == s else STATE_TONE_STYLE.get(s, ""))
            out.append(" ")
        tail = f"\n{shown} of {total}" + (f"  /{self.query_text}" if self.query_text else "")
        if not self.model.events_loaded:
            tail += f"  (loading events: {self.model.pending_frames} frames to go)"
        out.append(tail, "dim")
        return out


#: Plain Rich colours for the header line (it is a Static, not a themed panel).
STATE_TONE_STYLE = {s: {"tf--good": "green", "tf--bad": "red", "tf--warn": "yellow",
                        "tf--accent": "cyan", "tf--dim": "dim"}[tone]
                    for s, tone in STATE_TONE.items()}
