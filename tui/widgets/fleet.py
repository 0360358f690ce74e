"""The few pieces only the fleet view needs: its status line, counts by state, the workers
in brief and in full, and the RUNNING table (the task table with an age column)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable

from tui.fleet import WorkerRow, ago
from tui.fmt import fmt_count, fmt_many, fmt_num, fmt_t
from tui.taskindex import STATES, TaskRow
from tui.widgets.styling import COMPONENTS, STATE_TONE, Panel, first_fit, flow, tone
from tui.widgets.tasktable import TaskTable


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
        stale = s.since_poll is not None and s.since_poll > 3 * s.poll_s + 1
        if s.error:
            head = Text("ERROR ", tone(self, "tf--bad"))
            head.append(s.error, tone(self, "tf--bad"))  # first: the reason must show
        elif s.polls == 0:
            head = Text("connecting", tone(self, "tf--warn"))
        elif stale:
            head = Text("STALE", tone(self, "tf--warn"))
        else:
            head = Text("● LIVE", tone(self, "tf--good"))
        age = Text("" if s.since_poll is None else f"{s.since_poll:.0f}s ago",
                   tone(self, "tf--dim"))
        return first_fit([Text("  ").join([head, age, Text(s.store)]),
                          Text("  ").join([head, age, Text(_short(s.store))]),
                          Text("  ").join([head, age])],
                         max(1, self.size.width), [head, age, Text(s.store)])


def _short(url: str) -> str:
    """A URL without its query string (the schema is in the board's title anyway)."""
    return url.split("?", 1)[0]


class StatesPanel(Panel):
    """Counts by state over the whole store, in lifecycle order, each in its state's colour."""

    DEFAULT_CSS = """
    StatesPanel { height: auto; }
    """
    counts: reactive[Mapping[str, int] | None] = reactive(None, layout=True)

    def on_mount(self) -> None:
        self.border_title = "tasks by state"

    def render(self) -> Text:
        if self.counts is None:
            return Text("no poll yet", tone(self, "tf--dim"))
        parts = [Text.assemble((f"{state} ", tone(self, STATE_TONE.get(state, "tf--dim"))),
                               fmt_count(self.counts.get(state, 0)))
                 for state in STATES]
        return flow(parts, max(1, self.text_width), indent=0)


class WorkersSummary(Panel):
    """The workers in brief: processes, threads, busy, the freshest heartbeat (`w` for all)."""

    DEFAULT_CSS = """
    WorkersSummary { height: auto; }
    """
    rows: reactive[tuple[WorkerRow, ...] | None] = reactive(None, layout=True)
    now: reactive[float] = reactive(0.0)
    threads: reactive[int | None] = reactive(None)

    def on_mount(self) -> None:
        self.border_title = "workers"

    def render(self) -> Text:
        width = max(1, self.text_width)
        if self.rows is None:
            return Text("not polled yet", tone(self, "tf--dim"))
        if not self.rows:
            return Text("no task has been claimed yet", tone(self, "tf--dim"))
        busy = sum(w.busy for w in self.rows)
        beat = max((w.heartbeat for w in self.rows if w.heartbeat is not None), default=None)
        errors = sum(w.errors for w in self.rows)
        stuck = sum(w.stuck for w in self.rows)
        parts = [Text(fmt_many(len(self.rows), "process")),
                 Text(f"{fmt_num(self.threads)} live thread{'' if self.threads == 1 else 's'}"),
                 Text(f"{busy} busy", tone(self, "tf--warn" if busy else "tf--dim")),
                 Text(f"{stuck} stuck", tone(self, "tf--bad" if stuck else "tf--dim")),
                 Text(f"heartbeat {ago(beat, self.now)}"),
                 Text(fmt_many(errors, "error"), tone(self, "tf--bad" if errors else "tf--dim"))]
        return flow(parts, width, indent=0)


class RunningTable(TaskTable):
    """The RUNNING tasks (all of them, a fleet has hundreds at most): rows come as `TaskRow`s
    whose `since` is the age in seconds and whose `reason` is the task's kind; enter looks
    the task up. The worker comes right after the age: at 80 columns it must show."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "choose", "look up", show=True)]
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("task", "task"), ("age", "age"), ("try", "try"), ("worker", "worker"),
        ("batch", "batch"), ("trace", "trace"), ("kind", "kind"))
    PAGED: ClassVar[bool] = False
    DEFAULT_ORDER: ClassVar[str] = "longest running first"
    #: What each column sorts by (all rows are here: a fleet runs hundreds at most).
    SORT_BY: ClassVar[dict[str, Callable[[TaskRow], Any]]] = {
        "task": lambda r: r.task_id, "age": lambda r: r.since,
        "try": lambda r: r.attempt or 0, "worker": lambda r: r.worker or "",
        "batch": lambda r: r.batch_id or "", "trace": lambda r: r.trace_id or "",
        "kind": lambda r: r.reason or ""}

    def ordered(self, rows: list[TaskRow]) -> list[TaskRow]:
        """`rows` (longest running first) in the table's sort (`<` `>` `I`)."""
        if self.sort is None:
            return rows[::-1] if self.descending else rows
        return sorted(rows, key=self.SORT_BY[self.sort], reverse=self.descending)

    def cells(self, r: TaskRow) -> tuple[object, ...]:
        return (r.task_id, fmt_t(r.since), "" if r.attempt is None else str(r.attempt),
                r.worker or "", r.batch_id or "", r.trace_id or "", r.reason or "")


WORKER_COLUMNS = ("process", "threads", "busy", "stuck", "heartbeat", "last seen", "done",
                  "errors")


class WorkersTable(DataTable[object]):
    """One row per worker process; busy in the warning colour, errors in the error colour."""

    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | COMPONENTS

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        for name in WORKER_COLUMNS:
            self.add_column(name, key=name)

    def show(self, rows: Sequence[WorkerRow], now: float) -> None:
        keep = self.cursor_row
        self.clear()
        for w in rows:
            self.add_row(
                w.process, str(w.threads),
                Text(str(w.busy), tone(self, "tf--warn" if w.busy else "tf--dim")),
                Text(str(w.stuck), tone(self, "tf--bad" if w.stuck else "tf--dim")),
                ago(w.heartbeat, now), ago(w.last_seen, now), fmt_count(w.done),
                Text(fmt_count(w.errors), tone(self, "tf--bad" if w.errors else "tf--dim")),
                key=w.process)
        if rows:
            self.move_cursor(row=min(keep, len(rows) - 1), animate=False)


class WorkerPanel(Panel):
    """The process a looked-up task ran on: its row of the worker view and every task RUNNING
    on it now (what else the process is busy with), longest running first, as many as fit."""

    DEFAULT_CSS = """
    WorkerPanel { height: 1fr; }
    """
    worker: reactive[WorkerRow | None] = reactive(None, layout=False)
    running: reactive[tuple[TaskRow, ...]] = reactive((), layout=False)
    now: reactive[float] = reactive(0.0)
    note: reactive[str] = reactive("no worker has run it yet")

    def on_mount(self) -> None:
        self.border_title = "its worker"

    def render(self) -> Text | Group:
        w = self.worker
        if w is None:
            return Text(self.note, tone(self, "tf--dim"))
        width = max(1, self.text_width)
        head = flow([Text(w.process, tone(self, "tf--accent")), Text(f"{w.threads} threads"),
                     Text(f"{w.busy} busy", tone(self, "tf--warn" if w.busy else "tf--dim")),
                     Text(f"{w.stuck} stuck", tone(self, "tf--bad" if w.stuck else "tf--dim")),
                     Text(f"heartbeat {ago(w.heartbeat, self.now)}"),
                     Text(f"last seen {ago(w.last_seen, self.now)}"),
                     Text(f"done {fmt_count(w.done)}"),
                     Text(f"errors {fmt_count(w.errors)}",
                          tone(self, "tf--bad" if w.errors else "tf--dim"))], width, indent=0)
        if not self.running:
            return Group(head, Text(""), Text("nothing running on it", tone(self, "tf--dim")))
        room = max(1, self.content_size.height - len(head.plain.splitlines()) - 2)
        shown = self.running[:room]
        more = len(self.running) - len(shown)
        table = Table.grid(padding=(0, 1))
        for name in ("task", "age", "thread", "batch"):
            table.add_column(name, no_wrap=True)
        for r in shown:
            table.add_row(Text(r.task_id, tone(self, "tf--accent")), fmt_t(r.since),
                          Text(r.worker or "", tone(self, "tf--dim")), r.batch_id or "")
        title = f"running on it: {len(self.running)}" + (f" ({more} more)" if more else "")
        return Group(head, Text(""), Text(title, "bold"), table)
