"""Following an idle real worker and watching an idle store back off: a run that only
repeats its latest sample (a real worker samples every second) or a store whose polls find
nothing new costs ticks that grow to their maximum, and no redraw of the panels. (The CPU
share itself is a benchmark: benchmarks/test_bench_tui.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from textual.pilot import Pilot

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import TaskSpec
from taskfuse.store import open_store
from taskfuse.trace import TraceWriter
from tests.tui.test_app_pilot import _live_header, drive
from tui.app import POLL_MAX_S, QUIET_POLL_MAX_S, MonitorApp, create_app
from tui.fleet import FleetSample, WorkerRow, idle_repeat
from tui.fleet_app import POLL_MAX_S as FLEET_POLL_MAX_S
from tui.fleet_app import open_fleet
from tui.trace_model import Timeline


def test_a_repeated_sample_is_told_apart_from_a_new_one() -> None:
    tl = Timeline(["a", "b"])
    assert not tl.repeats(np.array([[1.0, np.nan]]))  # nothing to repeat yet
    tl.append(np.array([0.0]), np.array([[1.0, np.nan]]))
    assert tl.repeats(np.array([[1.0, np.nan], [1.0, np.nan]]))
    assert not tl.repeats(np.array([[1.0, np.nan], [2.0, np.nan]]))
    assert not tl.repeats(np.empty((0, 2)))


def test_following_a_run_that_only_repeats_its_sample_backs_off(tmp_path: Path) -> None:
    path = tmp_path / "idle-worker.trace"
    writer = TraceWriter(path, _live_header(), flush_every=5)
    writer.sample(0.0, [3, 1, 4, 0])
    writer.flush()
    t = [0.0]

    def beat(row: list[float]) -> None:
        t[0] += 1.0
        writer.sample(t[0], row)
        writer.flush()

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        drawn = []
        screen = app.screen
        original = screen.show
        screen.show = lambda: (drawn.append(app.t), original())[1]  # type: ignore[method-assign]
        beat([5, 2, 4, 0])  # a change: read, drawn, the short interval
        app._poll_tick()
        await app.wait_idle()
        assert app._poll_delay == app.poll_s and drawn
        drawn.clear()
        delays = []
        for _ in range(20):  # the worker idles: every second the same row again
            beat([5, 2, 4, 0])
            app._poll_tick()
            await app.wait_idle()
            delays.append(app._poll_delay)
            if app._poll_delay == QUIET_POLL_MAX_S:
                break
        assert app.model.span[1] == t[0]  # the time still moves (the time bar shows it)
        assert delays[-1] == QUIET_POLL_MAX_S > POLL_MAX_S, delays
        assert drawn == []  # ... but no panel was recomputed
        beat([6, 2, 4, 0])  # work again: drawn, and the next tick is short again
        app._poll_tick()
        await app.wait_idle()
        assert drawn and app._poll_delay == app.poll_s

    drive(create_app(path, follow=True), scenario)


def _sample(t: float, beat: float, running: tuple[object, ...] = ()) -> FleetSample:
    worker = WorkerRow("h:1", 4, 0, beat, beat, 20, 0)
    return FleetSample(t, {"SUCCESS": 20}, (), running, (worker,))  # type: ignore[arg-type]


def test_an_idle_fleet_poll_is_a_repeat_whatever_the_beats() -> None:
    assert idle_repeat(_sample(1.0, 0.5), _sample(9.0, 8.5))
    assert not idle_repeat(None, _sample(9.0, 8.5))
    changed = FleetSample(9.0, {"SUCCESS": 21}, (), (), _sample(9.0, 8.5).workers)
    assert not idle_repeat(_sample(1.0, 0.5), changed)


def test_the_fleet_view_of_an_idle_store_backs_off(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    sched = Scheduler(open_store(url))
    sched.submit_batch([TaskSpec("k", task_id="t0")], 0.0, "b1")
    app = open_fleet(url, poll_s=0.5)

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.wait_idle()
            await pilot.pause()
            screen = app.screen
            drawn = []
            original = screen.show_body
            screen.show_body = lambda: (drawn.append(1), original())[1]  # type: ignore[method-assign]
            delays = []
            for _ in range(20):
                app._poll_tick()
                await app.wait_idle()
                delays.append(app._poll_delay)
                if app._poll_delay == FLEET_POLL_MAX_S:
                    break
            assert delays[-1] == FLEET_POLL_MAX_S, delays
            assert drawn == [] and app.polls >= 2
            sched.submit_batch([TaskSpec("k", task_id="t1")], 0.0, "b1")
            app._poll_tick()
            await app.wait_idle()
            assert drawn and not app._quiet

    try:
        asyncio.run(main())
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]
