"""The task table's keys: j/k move like the arrows (k9s, htop), and paging never skips a
row (at 80x24 a page once moved by one row more than it showed: row 18 appeared only after
PageUp)."""

from __future__ import annotations

import re
from pathlib import Path

from textual.pilot import Pilot

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
