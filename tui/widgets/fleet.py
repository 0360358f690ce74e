"""The few pieces only the fleet view needs: its status line, counts by state, and the
RUNNING table (the trace monitor's task table with an age column instead of a time)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.events import Mount
from textual.reactive import reactive

from tui.model import fmt_num
from tui.taskindex import STATES
from tui.widgets.styling import STATE_TONE, Panel, tone
from tui.widgets.tasktable import TaskTable

RUNNING_COLUMNS = ("task", "state", "age", "try", "batch", "trace", "worker", "kind")


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """What the top line says: which store, how fresh the numbers are, what went wrong."""

    store: str  # already redacted
    polls: int
    since_poll: float | None  # seconds since the last good poll
    poll_s: float
    error: str | None


class FleetBar(Panel):
    """One line: LIVE (or stale, or the error), the store's redacted URL, the poll age."""

    DEFAULT_CSS = """
    FleetBar { height: 1; dock: top; background: $panel; padding: 0 1; }
    """
    status: reactive[FleetStatus | None] = reactive(None, layout=False)

    def render(self) -> Text:
        s = self.status
        if s is None:
            return Text("")
        out = Text()
        stale = s.since_poll is not None and s.since_poll > 3 * s.poll_s + 1
        if s.error:
            out.append("ERROR ", tone(self, "tf--bad"))
        elif s.polls == 0:
            out.append("connecting ", tone(self, "tf--warn"))
        elif stale:
            out.append("STALE ", tone(self, "tf--warn"))
        else:
            out.append("LIVE ", tone(self, "tf--good"))
        if s.error:  # first: a long URL must not push the reason off the line
            out.append(f"{s.error}  ", tone(self, "tf--bad"))
        out.append(s.store)
        if s.since_poll is not None:
            out.append(f"  polled {s.since_poll:.0f}s ago", tone(self, "tf--dim"))
        out.truncate(max(1, self.size.width))
        return out


class StatesPanel(Panel):
    """Counts by state over the whole store, in lifecycle order, each in its state's colour."""

    DEFAULT_CSS = """
    StatesPanel { height: auto; }
    """
    counts: reactive[Mapping[str, int] | None] = reactive(None, layout=False)

    def on_mount(self) -> None:
        self.border_title = "tasks by state"

    def render(self) -> Text:
        if self.counts is None:
            return Text("no poll yet", tone(self, "tf--dim"))
        out = Text()
        for k, state in enumerate(STATES):
            if k:
                out.append("  ")
            out.append(f"{state} ", tone(self, STATE_TONE.get(state, "tf--dim")))
            out.append(fmt_num(self.counts.get(state, 0)))
        return out


class RunningTable(TaskTable):
    """The RUNNING tasks: rows come as `TaskRow`s whose `since` is the age in seconds and
    whose `reason` is the task's kind; enter looks the task up."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "choose", "look up", show=True)]

    def on_mount(self, event: Mount) -> None:  # type: ignore[override]
        event.prevent_default()  # the task table's own columns are not added
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name, key in zip(RUNNING_COLUMNS, ("task", "state", "since", "try", "batch",
                                               "trace", "worker", "last reason"), strict=True):
            self.add_column(name, key=key)
