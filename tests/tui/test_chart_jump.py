"""A jump draws the charts of the time jumped to: the pool and downstream rows compare by
their numbers only, so a jump between two times with equal numbers kept the old chart
(`:1:30` at 120x40 showed `wait █`, one column, until `:0:45` then `:1:30`)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from tests.tui.screen import text_of
from tests.tui.test_app_pilot import drive, jump
from tui.app import MonitorApp, create_app
from tui.widgets.downstreams import DownstreamPanel
from tui.widgets.pools import PoolPanel


def _charts(path: Path, *times: str) -> tuple[str, str]:
    shown: list[tuple[str, str]] = []

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        for t in times:
            await jump(pilot, t)
            await pilot.pause()
        screen = app.screen
        shown.append((text_of(screen.query_one(PoolPanel)),
                      text_of(screen.query_one(DownstreamPanel))))

    drive(create_app(path), scenario, size=(120, 40))
    return shown[0]


def test_a_jump_draws_the_charts_of_its_time(lab_incident: Path) -> None:
    direct = _charts(lab_incident, "1:30")
    via = _charts(lab_incident, "0:45", "1:30")
    assert direct == via
