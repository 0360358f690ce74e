"""How a view ends and how a run that ended looks: Ctrl-C quits every view with 130, the
help lists every quit key, and a followed trace that wrote its footer no longer reads LIVE.
(SIGINT sent to the real commands is in tests/test_ctrl_c.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App
from textual.pilot import Pilot

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import TaskSpec
from taskfuse.store import open_store
from taskfuse.trace import TraceWriter
from tests.tui.screen import screen_text, text_of
from tests.tui.test_app_pilot import _live_header, drive
from tui.app import MonitorApp, create_app
from tui.fleet_app import open_fleet
from tui.quitting import INTERRUPTED
from tui.widgets.timebar import TimeBar


def _live(path: Path) -> TraceWriter:
    writer = TraceWriter(path, _live_header(), flush_every=5)
    for k in range(3):
        writer.sample(float(k), [k, 1, 4, 0])
    writer.flush()
    return writer


def test_a_followed_trace_that_ended_says_so(tmp_path: Path) -> None:
    writer = _live(tmp_path / "t.trace")

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        bar = app.screen.query_one(TimeBar)
        assert text_of(bar).startswith("● LIVE")
        writer.sample(3.0, [0, 0, 4, 0])
        writer.close({"makespan_s": 3.0})
        app.poll_now()
        await app.wait_idle()
        await pilot.pause()
        assert app.model.complete
        assert text_of(bar).startswith("■ ENDED") and "LIVE" not in text_of(bar)

    drive(create_app(tmp_path / "t.trace", follow=True, poll_s=3600), scenario)


def _exit_code(app: App[int], *keys: str, size: tuple[int, int] = (80, 24)
               ) -> tuple[int | None, str]:
    """Press `keys` (after `?`: the help's text is answered too); the app's exit value."""
    shown: list[str] = []

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            if keys[:1] == ("question_mark",):
                await pilot.press("question_mark")
                await pilot.pause()
                shown.append(screen_text(app))
            await pilot.press(*keys[1:] if keys[:1] == ("question_mark",) else keys)
            await pilot.pause()

    asyncio.run(main())
    return app.return_value, "".join(shown)


def test_ctrl_c_quits_the_trace_monitor_with_130_even_from_the_help(
        tmp_path: Path) -> None:
    _live(tmp_path / "t.trace")
    code, help_text = _exit_code(create_app(tmp_path / "t.trace", follow=True, poll_s=3600),
                                 "question_mark", "ctrl+c")
    assert code == INTERRUPTED
    assert "ctrl+c" in help_text and "ctrl+q" in help_text and "130" in help_text
    for key, want in (("q", 0), ("ctrl+q", 0), ("ctrl+c", INTERRUPTED)):
        assert _exit_code(create_app(tmp_path / "t.trace"), key)[0] == want, key


def test_ctrl_c_quits_the_fleet_view_with_130(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    sched = Scheduler(open_store(url))
    sched.submit_batch([TaskSpec("k", task_id="t0")], 0.0, "b1")
    try:
        for key, want in (("question_mark", INTERRUPTED), ("q", 0), ("ctrl+q", 0),
                          ("ctrl+c", INTERRUPTED)):
            app = open_fleet(url, poll_s=3600)
            keys = ("question_mark", "ctrl+c") if key == "question_mark" else (key,)
            code, help_text = _exit_code(app, *keys, size=(100, 30))
            app.store.close()  # type: ignore[attr-defined]
            assert code == want, key
            if help_text:
                assert "ctrl+c" in help_text and "ctrl+q" in help_text
    finally:
        sched.store.close()  # type: ignore[attr-defined]
