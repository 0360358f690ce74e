"""The task view: every task by state at the cursor's time, filterable, searchable, paged.

The header says how many tasks are in each state (`≥` and "loading 34%" while events up to
the cursor are still being read: those counts only grow), which window of the selection the
table shows, and the active search with its match count, or that nothing matches.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Static

from tui.fmt import fmt_count, fmt_many, fmt_pct
from tui.messages import PageMove, SortChanged
from tui.screens.base import MonitorScreen
from tui.search import Found
from tui.taskindex import STATES, Selection
from tui.widgets.commandbar import CommandBar, FilterLine
from tui.widgets.styling import STATE_TONE, flow
from tui.widgets.tasktable import TaskTable

#: Plain Rich colours for the header line (it is a Static, not a themed panel).
STATE_TONE_STYLE = {s: {"tf--good": "green", "tf--bad": "red", "tf--warn": "yellow",
                        "tf--accent": "cyan", "tf--dim": "dim"}[tone]
                    for s, tone in STATE_TONE.items()}


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

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._found: tuple[tuple[str, int], Found] | None = None
        self._selection: tuple[tuple[object, ...], Selection] | None = None
        self.first_row = 0

    def compose_body(self) -> ComposeResult:
        yield Static(id="task-filter")
        yield TaskTable(id="task-table")

    def watch_state(self) -> None:
        self.first_row = 0
        self.show(follow=False)

    def watch_query_text(self) -> None:
        self.first_row = 0
        self.show(follow=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self.show)

    def action_state(self, k: int) -> None:
        self.state = None if k == 0 else STATES[k - 1]

    def action_cycle_state(self) -> None:
        order = [None, *STATES]
        self.state = order[(order.index(self.state) + 1) % len(order)]

    def clear_filters(self) -> bool:
        """Esc: drop the search and the state filter; False if there was none."""
        if not self.query_text and self.state is None:
            return False
        self.query_text, self.state = "", None
        return True

    # -- what is shown ---------------------------------------------------------------------

    def found(self) -> Found | None:
        """What the active search matches (cached: the index only grows)."""
        if not self.query_text:
            return None
        key = (self.query_text, self.model.tasks.n_tasks)
        if self._found is None or self._found[0] != key:
            self._found = (key, self.model.tasks.search(self.query_text))
        return self._found[1]

    def selection(self) -> Selection:
        found = self.found()
        table = self.query_one(TaskTable)
        key = (self.t, self.state, self.query_text, self.model.tasks.n_events, table.sort,
               table.descending)
        if self._selection is None or self._selection[0] != key:
            codes = None if found is None else found.codes
            tasks = self.model.tasks
            chosen = tasks.select(self.t, self.state, codes)
            self._selection = (key, tasks.order(chosen, table.sort, table.descending))
        return self._selection[1]

    def show(self, follow: bool = True, task: str | None = None) -> None:
        """Refill the table at the cursor's time. With `follow` (a new time, new events, a
        new sort) the highlighted task keeps its place on screen and the window moves with
        it; paging and a new filter (`follow=False`) move the window instead. `task`: the
        one to keep highlighted when the table no longer has it (a new sort cleared it)."""
        if not self.is_mounted:
            return
        table = self.query_one(TaskTable)
        sel = self.selection()
        page = table.page_rows
        task = (task or table.highlighted_task) if follow else None
        at = None if task is None else self.model.tasks.position(sel, task)
        if at is not None:
            self.first_row = at - table.cursor_row
        self.first_row = max(0, min(self.first_row, len(sel) - page))
        table.show(self.model.tasks.rows(sel, self.first_row, page), self.first_row, len(sel),
                   follow=task)
        self.query_one("#task-filter", Static).update(self._header(len(sel), page))
        self._show_search(len(sel))

    def _show_search(self, n: int) -> None:
        found = self.found()
        summary, miss = self.search_summary(found, n)
        bar = self.query_one(CommandBar)
        if bar.is_open and bar.mode == "/":
            bar.show_info(summary, miss)
        self.query_one(FilterLine).show_filter(
            "" if bar.is_open else self.query_text, summary, miss)

    def search_summary(self, found: Found | None, n: int) -> tuple[str, bool]:
        """"12 tasks", "12 tasks (fuzzy)", "no match" — and whether it is a miss."""
        if found is None:
            return "", False
        if not len(found.codes):
            note = " (fuzzy search is off above 200k ids)" if found.fuzzy_skipped else ""
            return f"no match{note}", True
        where = "" if self.state is None else f", {n} {self.state.lower()} now"
        how = " (fuzzy)" if found.fuzzy else ""
        return f"{fmt_many(len(found.codes), 'task')}{how}{where}", False

    def _header(self, total: int, page: int) -> Text:
        counts = self.model.counts_at(self.t)
        at_least = "" if counts.final else "≥"
        width = max(20, self.size.width - 2)
        tabs = [Text(f"[0]all {at_least}{fmt_count(counts.total)}",
                     "reverse" if self.state is None else "")]
        for k, s in enumerate(STATES):
            tabs.append(Text(f"[{k + 1}]{s.lower()} {at_least}{fmt_count(counts.by_state[s])}",
                             "reverse" if self.state == s else STATE_TONE_STYLE.get(s, "")))
        out = flow(tabs, width, indent=0, sep=" ")
        out.append("\n")
        first, last = self.first_row + 1, min(total, self.first_row + page)
        rows = f"rows {fmt_count(first)}-{fmt_count(last)} of {fmt_count(total)}" if total \
            else "no tasks"
        tail = [Text(rows, "dim"), Text(self.query_one(TaskTable).sort_text, "dim")]
        if self.query_text:
            summary, miss = self.search_summary(self.found(), total)
            tail.append(Text(f"/{self.query_text}: {summary}", "yellow" if miss else "dim"))
        if not counts.final:
            tail.append(Text(f"loading {fmt_pct(counts.loaded)}: counts only grow", "yellow"))
        out.append_text(flow(tail, width, indent=0))
        return out

    @on(SortChanged)
    def _sorted(self, message: SortChanged) -> None:
        message.stop()
        self.show(task=message.task)  # it stays highlighted, wherever the sort puts it

    @on(PageMove)
    def _page(self, message: PageMove) -> None:
        message.stop()
        table = self.query_one(TaskTable)
        total, page = table.total, table.page_rows
        if message.to == "first":
            self.first_row = 0
            table.move_cursor(row=0)
        elif message.to == "last":
            self.first_row = max(0, total - page)
            table.move_cursor(row=page - 1)
        else:
            self.first_row = max(0, min(self.first_row + message.rows, total - page))
        self.show(follow=False)
