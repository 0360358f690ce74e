"""Names from a run (task ids, batch ids, kinds, reasons) reach the terminal as text: no
Rich markup is interpreted and no escape sequence is sent (issue 27, the monitor's part)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from taskfuse.trace import TraceWriter
from tests.tui.screen import screen_text, text_of
from tests.tui.test_app_pilot import _live_header, drive
from tui.app import MonitorApp, create_app
from tui.widgets.batches import BatchPanel

TASK = "t[red]1\x1b[2J"
BATCH = "[b]x\x1b]0;pwn\x07"


def test_markup_and_escapes_in_names_are_shown_as_text(tmp_path: Path) -> None:
    path = tmp_path / "names.trace"
    header = _live_header()
    header["series"] = [*header["series"], f"batch.{BATCH}.PENDING"]  # type: ignore[misc]
    w = TraceWriter(path, header)
    w.sample(0.0, [1, 0, 4, 0, 1])
    w.event((0.0, "submit", TASK, BATCH, "tr", None, "PENDING", None, 1, None, None, None))
    w.event((1.0, "move", TASK, BATCH, None, "PENDING", "RUNNING", "[bold]why\x1b[5m", 1,
             "w\x1b[1m", None, None))
    w.close({"makespan_s": 1.0})

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        batches = text_of(app.screen.query_one(BatchPanel))
        assert "[b]x\\x1b]0;pwn\\x07" in batches and "\x1b" not in batches
        await pilot.press("end", "t")
        await pilot.pause()
        table = screen_text(app)
        assert "t[red]1\\x1b[2J" in table and "\x1b" not in table
        assert "[bold]why\\x1b[5m" in table and "w\\x1b[1m" in table

    drive(create_app(path), scenario, size=(120, 30))
