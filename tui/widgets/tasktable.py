"""The task table: one page of a selection of tasks, scrolled through all of them.

Why a window and not every row: a DataTable holds its rows as Python objects, and a million
of them take seconds to add. The table holds exactly the rows that fit; moving the cursor
past the first or last one, or paging, asks the screen for the next window (`PageMove`),
so scrolling reaches every task at the cost of one page per move.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from tui.fmt import fmt_t, safe_text
from tui.messages import PageMove, SortChanged, TaskChosen
from tui.taskindex import TaskRow
from tui.widgets.styling import COMPONENTS, STATE_TONE, tone

COLUMNS = ("task", "state", "since", "try", "batch", "trace", "worker", "last reason")


class TaskTable(DataTable[object]):
    """Shows the rows it is given (data down); enter posts `TaskChosen`, moving past the
    page posts `PageMove` (events up)."""

    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | COMPONENTS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "choose", "history", show=True),
        Binding("g", "page_to('first')", "first", show=False),
        Binding("G", "page_to('last')", "last", show=False),
        Binding("j", "cursor_down", "down", show=False),  # vi keys, as in k9s and htop
        Binding("k", "cursor_up", "up", show=False),
        # htop's sort keys: < > choose the column, I inverts (k9s shows the sort the same way)
        Binding("greater_than_sign,full_stop", "sort_by(1)", "sort", key_display=">",
                show=False),
        Binding("less_than_sign,comma", "sort_by(-1)", "sort back", show=False),
        Binding("I", "sort_invert", "reverse", show=False),
    ]
    #: What the rows are in when no column is chosen (the header says so).
    DEFAULT_ORDER: ClassVar[str] = "newest change first"
    #: The columns; the fleet's table of RUNNING tasks names its own.
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = tuple((c, c) for c in COLUMNS)
    #: Windowed (the screen refills it on PageMove); an unpaged table holds all its rows.
    PAGED: ClassVar[bool] = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.first_row = 0  # index of the first row shown in the whole selection
        self.total = 0
        self.sort: str | None = None  # the column key the rows are sorted by (None: default)
        self.descending = False

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        """The columns, the sorted one marked ▲ or ▼ (as k9s and htop mark it)."""
        for name, key in self.COLUMNS:
            mark = "" if key != self.sort else " ▼" if self.descending else " ▲"
            self.add_column(Text(name + mark, "bold" if mark else ""), key=key)

    @property
    def sort_text(self) -> str:
        """The order of the rows in words: `sort since ▼`, or the default order."""
        if self.sort is None:
            return f"{self.DEFAULT_ORDER}{', reversed' if self.descending else ''}"
        name = next(n for n, k in self.COLUMNS if k == self.sort)
        return f"sort {name} {'▼' if self.descending else '▲'}"

    def action_sort_by(self, step: int) -> None:
        """The next (or previous) column to sort by, then the default order again."""
        keys = [None, *(k for _, k in self.COLUMNS)]
        self.sort = keys[(keys.index(self.sort) + step) % len(keys)]
        self.descending = False
        self._sort_changed()

    def action_sort_invert(self) -> None:
        self.descending = not self.descending
        self._sort_changed()

    def _sort_changed(self) -> None:
        task = self.highlighted_task
        self.clear(columns=True)
        self._add_columns()
        self.post_message(SortChanged(self.sort, self.descending, task))

    def on_resize(self) -> None:
        if self.PAGED:
            self.post_message(PageMove(0))  # another page size: the screen refills it

    @property
    def page_rows(self) -> int:
        """How many rows fit (the header takes one line)."""
        return max(1, self.size.height - 1 - (1 if self.show_horizontal_scrollbar else 0))

    def show(self, rows: list[TaskRow], offset: int = 0, total: int | None = None,
             follow: str | None = None) -> None:
        """Replace the rows with one window of the selection. The cursor stays on task
        `follow` when the rows hold it (rows move under a playing cursor: the highlight
        belongs to its task, not to a row), else on its row."""
        keep = self.cursor_row
        self.first_row, self.total = offset, len(rows) if total is None else total
        self.clear()
        for k, r in enumerate(rows):
            self.add_row(*self.cells(r), key=r.task_id)
            if r.task_id == follow:
                keep = k
        if rows:
            self.move_cursor(row=min(keep, len(rows) - 1), animate=False, scroll=False)
        if self.PAGED:
            self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """Long cells brought a horizontal scrollbar, which takes a row: refill the window
        one row shorter rather than let the last row hide under it."""
        if self.row_count > self.page_rows:
            self.post_message(PageMove(0))

    def cells(self, r: TaskRow) -> tuple[object, ...]:
        state = Text(r.state, tone(self, STATE_TONE.get(r.state, "tf--dim")))
        return (safe_text(r.task_id), state, fmt_t(r.since),
                "" if r.attempt is None else str(r.attempt), safe_text(r.batch_id),
                safe_text(r.trace_id), safe_text(r.worker), safe_text(r.reason))

    @property
    def highlighted_task(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return None if key.value is None else str(key.value)

    def action_choose(self) -> None:
        task = self.highlighted_task
        if task is not None:
            self.post_message(TaskChosen(task))

    # -- moving past the window ------------------------------------------------------------

    def action_cursor_down(self) -> None:
        if self.PAGED and self.cursor_row >= self.row_count - 1 \
                and self.first_row + self.row_count < self.total:
            self.post_message(PageMove(1))
        else:
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if self.PAGED and self.cursor_row <= 0 and self.first_row > 0:
            self.post_message(PageMove(-1))
        else:
            super().action_cursor_up()

    @property
    def _page_step(self) -> int:
        """Rows a page key moves: the rows shown (one fewer than `page_rows` while a
        horizontal scrollbar takes a line; moving by `page_rows` then skipped a row)."""
        return max(1, min(self.row_count, self.page_rows)) if self.row_count else self.page_rows

    def action_page_down(self) -> None:
        if self.PAGED:
            self.post_message(PageMove(self._page_step))
        else:
            super().action_page_down()

    def action_page_up(self) -> None:
        if self.PAGED:
            self.post_message(PageMove(-self._page_step))
        else:
            super().action_page_up()

    def action_page_to(self, where: str) -> None:
        if self.PAGED:
            self.post_message(PageMove(to=where))
        elif self.row_count:
            self.move_cursor(row=0 if where == "first" else self.row_count - 1)
