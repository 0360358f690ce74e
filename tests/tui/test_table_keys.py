"""The task table's keys: j/k move like the arrows (k9s, htop), and paging never skips a
row (at 80x24 a page once moved by one row more than it showed: row 18 appeared only after
PageUp)."""

from __future__ import annotations

import re
from pathlib import Path

from textual.pilot import Pilot

from tests.tui.screen import screen_text
from tests.tui.test_app_pilot import drive, jump
from tests.tui.tracegen import Incident
from tui.app import MonitorApp, create_app
from tui.widgets.tasktable import TaskTable


def _window(app: MonitorApp) -> tuple[int, int]:
    header = str(app.screen.query_one("#task-filter").render())
    found = re.search(r"rows ([\d,]+)-([\d,]+) of", header)
    assert found, header
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_page_down_and_up_show_every_row_once(lab_incident: Path) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, "90")
        await pilot.press("t")
        await pilot.pause()
        table = app.screen.query_one(TaskTable)
        seen: list[str] = []
        for _ in range(3):
            first, last = _window(app)
            assert table.row_count == last - first + 1  # the header tells what is shown
            seen += [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
            await pilot.press("pagedown")
            await pilot.pause()
            assert _window(app)[0] == last + 1  # the next page starts right after
        assert len(seen) == len(set(seen))
        await pilot.press("pageup")
        await pilot.pause()
        assert _window(app)[1] == _window(app)[0] + table.row_count - 1

    drive(create_app(lab_incident), scenario, size=(80, 24))


def test_j_and_k_move_the_highlight(incident: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, "90")
        await pilot.press("t")
        await pilot.pause()
        table = app.screen.query_one(TaskTable)
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1

    drive(create_app(incident.path), scenario, size=(80, 24))


def test_while_playing_the_highlight_stays_on_its_task(incident: Incident) -> None:
    """Rows move under a playing cursor (newest change first); the highlight moves with its
    task, not with its row (issue 25, item 10: it stayed on a row position)."""
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, "60")
        await pilot.press("t", "j", "j", "j")
        await pilot.pause()
        screen = app.tasks_screen
        table = screen.query_one(TaskTable)
        task = table.highlighted_task
        assert task is not None and table.cursor_row == 3
        before = app.model.tasks.position(screen.selection(), task)
        await pilot.press("space")  # play
        for _ in range(20):
            app.advance(0.5)  # the playback frames, ten seconds of the run
        await pilot.press("space")  # pause
        await pilot.pause()
        after = app.model.tasks.position(screen.selection(), task)
        assert before is not None and after is not None and after > before  # it moved
        assert table.highlighted_task == task

    drive(create_app(incident.path), scenario, size=(80, 24))


def test_sort_keys_order_every_task_and_show_the_sort(incident: Incident) -> None:
    """`>` cycles the sort column, `I` reverses it (htop's keys); the header and the column
    say so, the whole selection is sorted (not one window), the highlight keeps its task,
    and the help lists the keys (issue 25, item 10: no sort by column)."""
    from tui.screens.help import HelpScreen
    from tui.taskindex import STATES

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, "90")
        await pilot.press("t", "j", "j")
        await pilot.pause()
        screen = app.tasks_screen
        table = screen.query_one(TaskTable)
        task = table.highlighted_task
        header = lambda: str(screen.query_one("#task-filter").render())  # noqa: E731
        assert "newest change first" in header()
        every = app.model.tasks.rows(screen.selection(), 0, 10**6)
        await pilot.press("greater_than_sign")  # by task id, ascending
        await pilot.pause()
        assert "sort task ▲" in header() and str(table.ordered_columns[0].label) == "task ▲"
        assert table.highlighted_task == task  # the highlight kept its task
        ids = [r.task_id for r in app.model.tasks.rows(screen.selection(), 0, 10**6)]
        assert ids == sorted(r.task_id for r in every)
        await pilot.press("I")  # reversed: the last id first, from the whole selection
        await pilot.press("g")
        await pilot.pause()
        assert "sort task ▼" in header()
        assert str(table.get_row_at(0)[0]) == max(r.task_id for r in every)
        await pilot.press("greater_than_sign")  # next column: state, ascending
        await pilot.pause()
        states = [r.state for r in app.model.tasks.rows(screen.selection(), 0, 10**6)]
        assert states == sorted(states, key=STATES.index) and "sort state ▲" in header()
        await pilot.press("less_than_sign", "less_than_sign")  # back to the default
        await pilot.pause()
        assert "newest change first" in header()
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        assert "< > I            sort / reverse" in screen_text(app)

    drive(create_app(incident.path), scenario, size=(80, 24))
