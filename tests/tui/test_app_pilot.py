"""Pilot drives the monitor: keys in, widget state and typed messages out.

No test settles by sleeping: `wait_idle()` returns once the loading thread's round has been
applied, and `pilot.pause()` is used only where Textual needs a refresh after a key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.message import Message
from textual.pilot import Pilot

from taskfuse.trace import TraceWriter, read_trace
from tests.tui.screen import screen_text, text_of
from tests.tui.tracegen import Incident
from tui.app import MonitorApp, create_app
from tui.messages import CommandEntered, SearchChanged, TaskChosen
from tui.screens.dashboard import DashboardScreen
from tui.screens.help import HelpScreen
from tui.screens.task_detail import TaskDetailScreen
from tui.screens.tasks import TasksScreen
from tui.widgets.alerts import AlertPanel
from tui.widgets.batches import BatchPanel
from tui.widgets.business import BusinessPanel
from tui.widgets.commandbar import CommandBar, FilterLine
from tui.widgets.downstreams import DownstreamPanel
from tui.widgets.history import HistoryView
from tui.widgets.overview import OverviewPanel
from tui.widgets.pools import PoolPanel
from tui.widgets.tasktable import TaskTable
from tui.widgets.timebar import TimeBar

Scenario = Callable[[MonitorApp, Pilot[int]], Awaitable[None]]


def drive(app: MonitorApp, scenario: Scenario, size: tuple[int, int] = (80, 24),
          hook: Callable[[Message], None] | None = None) -> None:
    async def main() -> None:
        async with app.run_test(size=size, message_hook=hook) as pilot:
            await app.wait_idle()
            await scenario(app, pilot)

    asyncio.run(main())


async def jump(pilot: Pilot[int], text: str) -> None:
    """Type `:TEXT<enter>` like a user would."""
    await pilot.press("colon", *text, "enter")


def test_gateway_breaker_open_then_closed(incident: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, f"{incident.gateway_open + 1:.1f}")
        biz = app.screen.query_one(BusinessPanel)
        assert app.t == pytest.approx(incident.gateway_open + 1, abs=0.05)
        assert "gateway OPEN" in text_of(biz)
        assert "✗ broken" in text_of(biz)
        assert "OPEN" in text_of(app.screen.query_one(DownstreamPanel))
        assert "success_rate_low" in text_of(app.screen.query_one(AlertPanel))
        await jump(pilot, f"{incident.gateway_closed + 1:.1f}")
        assert "gateway CLOSED" in text_of(biz)
        assert "OPEN" not in text_of(biz)

    drive(create_app(incident.path), scenario)


def test_play_pause_speed_and_seek_keys(incident: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        t0, t1 = app.model.span
        assert app.t == t0 and not app.playing
        await pilot.press("space")
        assert app.playing
        await pilot.press("space")
        assert not app.playing
        await pilot.press("plus", "plus")
        assert app.speed == 5
        await pilot.press("minus", "minus", "minus")
        assert app.speed == 0.5
        start = app.t
        await pilot.press("right")
        step = app.t - start
        assert step > 0
        await pilot.press("shift+right")
        assert app.t == pytest.approx(start + 11 * step)
        await pilot.press("left")
        assert app.t == pytest.approx(start + 10 * step)
        await pilot.press("end")
        assert app.t == t1
        await pilot.press("home")
        assert app.t == t0
        info = app.screen.query_one(TimeBar).info
        assert info is not None and info.speed == 0.5 and info.t == t0

    drive(create_app(incident.path), scenario)


def test_playing_advances_by_speed_and_stops_at_the_end(incident: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        app.speed = 20
        app.advance(0.5)
        assert app.t == pytest.approx(10.0)
        app.playing = True
        app.advance(10_000)
        assert app.t == app.model.span[1] and not app.playing

    drive(create_app(incident.path), scenario)


def test_filter_search_and_drill_down(incident: Incident) -> None:
    seen: list[Message] = []

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end", "t")
        assert isinstance(app.screen, TasksScreen)
        table = app.screen.query_one(TaskTable)
        assert table.total == incident.n_tasks
        assert 0 < table.row_count == table.page_rows < incident.n_tasks  # one window
        await pilot.press("4")  # FAILED
        assert app.screen.state == "FAILED"
        assert table.row_count == incident.final_counts["FAILED"]
        states = {str(table.get_row_at(k)[1]) for k in range(table.row_count)}
        assert states == {"FAILED"}
        await pilot.press("0", "slash", *incident.task_ids[7], "enter")
        assert table.row_count == 1
        assert table.highlighted_task == incident.task_ids[7]
        await pilot.press("enter")
        assert isinstance(app.screen, TaskDetailScreen)
        history = app.screen.query_one(HistoryView).history
        assert history is not None and history.task_id == incident.task_ids[7]
        assert history.rows[0].kind == "submit"
        await pilot.press("escape")
        assert isinstance(app.screen, TasksScreen)
        await pilot.press("escape")  # first esc clears the search
        assert app.screen.query_text == "" and table.total == incident.n_tasks
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)

    drive(create_app(incident.path), scenario, hook=seen.append)
    unique = list({id(m): m for m in seen}.values())  # the hook sees each hop of a bubble
    commands = [m for m in unique if isinstance(m, CommandEntered)]
    assert [(c.mode, c.text) for c in commands] == [("/", incident.task_ids[7])]
    assert [m.task_id for m in unique if isinstance(m, TaskChosen)] == [incident.task_ids[7]]


def test_the_task_table_scrolls_through_every_task(incident: Incident) -> None:
    """Down past the last row moves the window by one; pgdn by a page; G to the end: every
    task of the run is reachable, each exactly once, newest change first."""

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end", "t")
        table = app.screen.query_one(TaskTable)
        page = table.page_rows
        seen: dict[int, str] = {}

        def read() -> None:  # rows by their place in the whole selection
            for k in range(table.row_count):
                seen[table.first_row + k] = str(table.get_row_at(k)[0])

        read()
        await pilot.press(*["down"] * (page - 1))  # to the last row of the window
        assert table.first_row == 0
        await pilot.press("down")  # past it: the window moves one row
        assert table.first_row == 1 and table.cursor_row == page - 1
        read()
        while table.first_row + table.row_count < table.total:
            before = table.first_row
            await pilot.press("pagedown")
            assert table.first_row > before
            read()
        assert len(seen) == incident.n_tasks and sorted(seen) == list(range(incident.n_tasks))
        assert sorted(seen.values()) == sorted(incident.task_ids)
        header = str(app.screen.query_one("#task-filter").render())
        page = table.page_rows  # a horizontal scrollbar (long reasons) takes a row
        first = incident.n_tasks - page + 1
        assert f"rows {first}-{incident.n_tasks} of {incident.n_tasks}" in header
        await pilot.press("g")
        assert table.first_row == 0 and table.cursor_row == 0
        await pilot.press("G")
        assert table.first_row == incident.n_tasks - page

    drive(create_app(incident.path), scenario)


def test_prompts_show_what_is_typed_and_find_ids(skus: Incident) -> None:
    """The issue's test: `:skus-5` opens that task, `/sku-1` finds every task whose id or
    trace id holds it (as you type), a miss says so, `?` lists the keys."""
    seen: list[Message] = []
    trace_hits = {t for t, tr in skus.trace_of.items() if "sku-1" in tr}

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end", "colon", *"skus-5")
        bar = app.screen.query_one(CommandBar)
        assert bar.is_open and bar.entry.value == "skus-5"
        assert screen_text(app).splitlines()[-2].startswith(" :skus-5")  # on screen, typed
        await pilot.press("enter")
        assert isinstance(app.screen, TaskDetailScreen) and app.screen.task_id == "skus-5"
        await pilot.press("escape", "slash", *"sku-1")
        assert isinstance(app.screen, TasksScreen) and app.screen.query_text == "sku-1"
        table = app.screen.query_one(TaskTable)
        assert table.total == len(trace_hits) > 1  # found while typing, before enter
        info = str(app.screen.query_one("#prompt-info").render())
        assert info.startswith(f"{len(trace_hits)} tasks")
        assert screen_text(app).splitlines()[-2].startswith(" /sku-1 ")  # typed, on screen
        assert not app.screen.query_one(FilterLine).display  # the prompt shows it for now
        await pilot.press("enter")
        listed = {str(table.get_row_at(k)[0]) for k in range(table.row_count)}
        assert listed <= trace_hits
        footer = app.screen.query_one(FilterLine)
        assert footer.display and f"/sku-1  {len(trace_hits)} tasks" in str(footer.render())
        await pilot.press("escape")  # esc clears the search
        assert app.screen.query_text == "" and not footer.display
        await pilot.press("slash", *"zzz")
        assert table.row_count == 0
        assert "no match" in str(app.screen.query_one("#prompt-info").render())
        assert "/zzz: no match" in str(app.screen.query_one("#task-filter").render())
        await pilot.press("escape")  # in the prompt: closes it and drops the search
        assert app.screen.query_text == "" and table.total == skus.n_tasks
        await pilot.press("slash", *"sku-1", "enter", "d", "t")
        assert app.screen.query_text == ""  # a search does not linger after leaving
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = screen_text(app)
        for key in ("space", "home end", ":90 :1:30", "/", "0-6 s", "g G", "esc", "q"):
            assert key in help_text, key

    drive(create_app(skus.path), scenario, hook=seen.append)
    unique = list({id(m): m for m in seen}.values())
    typed = [m.text for m in unique if isinstance(m, SearchChanged)]
    assert typed[:5] == ["s", "sk", "sku", "sku-", "sku-1"]  # one search per keystroke
    first = next(c for c in unique if isinstance(c, CommandEntered))
    assert (first.mode, first.text) == (":", "skus-5")


def test_a_part_of_ids_from_the_jump_prompt_opens_the_table(skus: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end")
        await jump(pilot, "kus-29")  # skus-29, skus-290..299: several tasks
        assert isinstance(app.screen, TasksScreen) and app.screen.query_text == "kus-29"
        await jump(pilot, "nothing-like-it")
        assert isinstance(app.screen, TasksScreen)  # only a warning

    drive(create_app(skus.path), scenario)


def test_search_by_trace_id_from_the_dashboard(incident: Incident) -> None:
    task = incident.task_ids[100]
    trace = incident.trace_of[task]

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end", "slash", *trace, "enter")
        assert isinstance(app.screen, TasksScreen)
        table = app.screen.query_one(TaskTable)
        listed = {str(table.get_row_at(k)[0]) for k in range(table.row_count)}
        assert task in listed
        await jump(pilot, f"task {task}")
        assert isinstance(app.screen, TaskDetailScreen) and app.screen.task_id == task

    drive(create_app(incident.path), scenario)


def test_the_history_follows_the_cursor(incident: Incident) -> None:
    task = incident.task_ids[-1]

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("end")
        await jump(pilot, f"task {task}")
        view = app.screen.query_one(HistoryView)
        assert view.history is not None
        full = len(view.history.rows)
        await pilot.press("home")
        assert view.history is not None and len(view.history.rows) < full

    drive(create_app(incident.path), scenario)


def test_help_theme_and_quit(incident: Incident) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)
        assert app.theme == "textual-light"
        await pilot.press("T")
        assert app.theme == "textual-dark"
        await jump(pilot, "bogus")
        assert isinstance(app.screen, DashboardScreen)  # a bad jump only warns
        await pilot.press("q")
        assert app.return_code == 0

    drive(create_app(incident.path, theme="light"), scenario)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_every_panel_is_on_screen(incident: Incident, size: tuple[int, int]) -> None:
    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await jump(pilot, f"{incident.gateway_open:.0f}")
        width, height = size
        for panel in (OverviewPanel, DownstreamPanel, PoolPanel, BusinessPanel, BatchPanel,
                      AlertPanel):
            region = app.screen.query_one(panel).region
            assert region.width >= 30 and region.height >= 3, panel
            assert region.right <= width and region.bottom <= height - 1, panel
        batches = app.screen.query_one(BatchPanel)
        assert batches.content_size.height >= len(incident.batches)

    drive(create_app(incident.path), scenario, size=size)


def _live_header() -> dict[str, object]:
    return {"source": "runtime", "scenario": "live", "seed": 1, "sample_interval_s": 1.0,
            "series": ["queue_depth", "running", "running_limit", "biz.breaker"],
            "meta": {"workers": 4}}


def _submit(t: float, task: str) -> tuple[object, ...]:
    return (t, "submit", task, "b1", None, None, "PENDING", None, 1, None, None, None)


def test_follow_keeps_up_and_reports_a_stall(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "live.trace"
    writer = TraceWriter(path, _live_header(), flush_every=5)
    for k in range(3):
        writer.sample(float(k), [k, 1, 4, 0])
        writer.event(_submit(float(k), f"t{k}"))
    writer.flush()

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        assert app.t == 2.0 and app.live
        for k in range(3, 10):
            writer.sample(float(k), [k, 2, 4, 2 if k > 6 else 0])
            writer.event(_submit(float(k), f"t{k}"))
        writer.flush()
        app.poll_now()
        await app.wait_idle()
        assert app.t == 9.0  # live: the cursor rides the end
        assert "OPEN" in text_of(app.screen.query_one(BusinessPanel))
        assert app.model.tasks.counts_at(9.0)["PENDING"] == 10
        await pilot.press("left")
        assert not app.live
        now[0] = 60.0
        app.poll_now()
        await app.wait_idle()
        await pilot.pause()
        assert "stalled since 0:09.0" in text_of(app.screen.query_one(TimeBar))
        await pilot.press("end")
        assert app.live and app.t == 9.0
        writer.close(None)
        app.poll_now()
        await app.wait_idle()
        assert app.model.complete
        assert "stalled" not in text_of(app.screen.query_one(TimeBar))

    drive(create_app(path, follow=True, clock=lambda: now[0], poll_s=3600), scenario)


def test_a_corrupt_frame_shows_in_the_app(trace_copy: Path) -> None:
    data = bytearray(trace_copy.read_bytes())
    at = data.rfind(b"E", 0, len(data) // 2)  # somewhere inside an event frame's body
    data[at + 40 : at + 60] = b"\xff" * 20
    trace_copy.write_bytes(bytes(data))

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.pause()
        assert app.error is not None and "corrupt" in app.error
        assert "error:" in text_of(app.screen.query_one(TimeBar))

    drive(create_app(trace_copy), scenario)


def _gateway_windows(path: Path) -> tuple[float, float]:
    """A time inside the gateway breaker's first open spell, and one after it closed again."""
    changes = [(e.t, e.dst) for e in read_trace(path).events(kind="breaker")
               if e.subject == "gateway"]
    k_open = next(k for k, (_, dst) in enumerate(changes) if dst == "open")
    k_closed = next(k for k in range(k_open, len(changes)) if changes[k][1] == "closed")
    t_open = (changes[k_open][0] + changes[k_open + 1][0]) / 2
    t_after = changes[k_closed + 1][0] if k_closed + 1 < len(changes) else changes[k_closed][0] + 2
    return t_open, (changes[k_closed][0] + t_after) / 2


def test_the_lab_incident_shows_the_gateway_breaker(lab_incident: Path) -> None:
    """On the lab's own incident trace: OPEN while the gateway's breaker is open, then not."""
    t_open, t_closed = _gateway_windows(lab_incident)

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        biz = app.screen.query_one(BusinessPanel)
        await jump(pilot, f"{t_open:.2f}")
        assert "gateway OPEN" in text_of(biz)
        await jump(pilot, f"{t_closed:.2f}")
        assert "gateway CLOSED" in text_of(biz)

    drive(create_app(lab_incident), scenario)


def test_counts_say_loading_until_they_are_final(incident: Incident) -> None:
    """While event frames are still being decoded, the task view's counts are lower bounds:
    `≥` and "loading N%", never a number that looks final."""
    import threading

    app = create_app(incident.path)
    decode, calls = app.source.decode_next, [0]
    reached, release = threading.Event(), threading.Event()

    def gated() -> object:  # two frames go through, then loading waits for the test
        calls[0] += 1
        if calls[0] == 3:
            reached.set()
            release.wait(30)
        return decode()

    app.source.decode_next = gated  # type: ignore[method-assign]

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await asyncio.to_thread(reached.wait, 30)
            await pilot.pause()
            app.seek(incident.t_end)
            await pilot.press("t")
            header = str(app.screen.query_one("#task-filter").render())
            assert "all ≥" in header and "loading" in header and "counts only grow" in header
            loaded = app.model.loaded
            assert 0 < loaded < 1
            assert f"loading {loaded:.0%}" in text_of(app.screen.query_one(TimeBar))
            release.set()
            await app.wait_idle()
            await pilot.pause()
            header = str(app.screen.query_one("#task-filter").render())
            assert "≥" not in header and "loading" not in header
            assert f"all {incident.n_tasks}" in header

    asyncio.run(main())


def _live_run(tmp_path: Path) -> tuple[Path, TraceWriter]:
    """A followed run's file with its first three samples, and the writer that grows it."""
    path = tmp_path / "live.trace"
    writer = TraceWriter(path, _live_header(), flush_every=5)
    for k in range(3):
        writer.sample(float(k), [k, 1, 4, 0])
    writer.flush()
    return path, writer


def test_live_pause_and_play_are_one_indicator(tmp_path: Path) -> None:
    """A followed run: LIVE rides the end; space pauses (the cursor stays while the run
    grows); space plays from there and is LIVE again once it reaches the end."""
    path, writer = _live_run(tmp_path)

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        bar = app.screen.query_one(TimeBar)
        assert app.live and text_of(bar).startswith("● LIVE")
        await pilot.press("space")
        assert not app.live and not app.playing and text_of(bar).startswith("⏸ x1")
        for k in range(3, 20):
            writer.sample(float(k), [k, 1, 4, 0])
        writer.flush()
        app.poll_now()
        await app.wait_idle()
        await pilot.pause()
        assert app.t == 2.0  # paused: the cursor stays
        assert "following, 17s behind" in text_of(bar)
        await pilot.press("space")
        assert app.playing and text_of(bar).startswith("▶ x1")
        before = app.t  # the frame timer may have moved it a frame already
        app.advance(5.0)
        assert app.t == pytest.approx(before + 5.0) and app.playing
        app.advance(100.0)  # reaches the end of what is written: LIVE again
        await pilot.pause()
        assert app.live and not app.playing and app.t == 19.0
        assert text_of(bar).startswith("● LIVE")

    drive(create_app(path, follow=True, poll_s=3600), scenario)


def test_playing_a_followed_run_closes_the_gap_while_it_grows(tmp_path: Path) -> None:
    """Play after pause catches up: the run's growth during playback is added to each frame,
    so the gap to the live end shrinks (it widened at x1 behind a paced simulation)."""
    path, writer = _live_run(tmp_path)

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        await pilot.press("space")  # LIVE -> paused at 2
        for k in range(3, 20):
            writer.sample(float(k), [k, 1, 4, 0])
        writer.flush()
        app.poll_now()
        await app.wait_idle()
        await pilot.press("space")  # play from 2: 17 s behind
        assert app.playing
        gap = app.model.span[1] - app.t
        for k in range(20, 60):  # the run grows 40 s while playback plays
            writer.sample(float(k), [k, 1, 4, 0])
        writer.flush()
        app.poll_now()
        await app.wait_idle()
        app.advance(1.0)
        await pilot.pause()
        assert app.model.span[1] == 59.0
        assert app.model.span[1] - app.t <= gap - 1.0 + 1e-9  # closed by a second, not +40
        app.advance(100.0)
        await pilot.pause()
        assert app.live and app.t == 59.0

    drive(create_app(path, follow=True, poll_s=3600), scenario)


def test_following_an_idle_file_reads_nothing(tmp_path: Path) -> None:
    """The follow timer only stats the file: no read, no redraw while it does not change,
    and it checks less and less often (1.5x per idle check, up to POLL_MAX_S)."""
    from tui.app import POLL_MAX_S

    path = tmp_path / "idle.trace"
    writer = TraceWriter(path, _live_header(), flush_every=5)
    writer.sample(0.0, [1, 1, 4, 0])
    writer.flush()

    async def scenario(app: MonitorApp, pilot: Pilot[int]) -> None:
        reads = app.polls
        for _ in range(20):
            assert app.poll_now() is False
        assert app.polls == reads
        delays = []
        app._poll_delay = app.poll_s  # the real timer may have backed off once already
        for _ in range(12):  # no await in here: the real timer cannot interleave
            app._poll_tick()
            delays.append(app._poll_delay)
        assert delays[0] == pytest.approx(0.375) and delays[-1] == POLL_MAX_S
        writer.sample(1.0, [2, 1, 4, 0])
        writer.flush()
        app._poll_tick()  # changed: read at once, and back to the short interval
        await app.wait_idle()
        assert app.polls == reads + 1 and app._poll_delay == app.poll_s
        assert app.model.span[1] == 1.0

    drive(create_app(path, follow=True), scenario)
