"""The events and running panels: what they list at a known moment of the incident, in which
order, and what they drop when the room is small.

Their docstrings promise: events are the notable ones (breakers, alerts, failures, timeouts,
cancels, retries) up to the cursor, newest first, as many lines as fit; running lists the
tasks RUNNING at the cursor, newest first, as many as fit, with the whole count in its title.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
from textual.app import App, ComposeResult

from tests.tui.screen import rendered_lines, text_of
from tests.tui.tracegen import Incident
from tui.app import MonitorApp, create_app
from tui.fmt import fmt_t
from tui.taskindex import HistoryRow, TaskRow
from tui.trace_model import TraceModel
from tui.widgets.events import EventsPanel
from tui.widgets.overview import OverviewPanel
from tui.widgets.running import RunningPanel

WIDE_TALL = (200, 60)


def on_dashboard(path: object, t: float, size: tuple[int, int],
                 check: Callable[[MonitorApp], Awaitable[None] | None]) -> None:
    app = create_app(path)  # type: ignore[arg-type]

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await app.wait_idle()
            app.seek(t)
            await pilot.pause()
            check(app)

    asyncio.run(main())


def test_events_at_the_gateway_open_spell(skus: Incident) -> None:
    t = skus.gateway_open + 1

    def check(app: MonitorApp) -> None:
        panel = app.screen.query_one(EventsPanel)
        rows = panel.rows
        assert len(rows) == app.model.tasks.n_notable(t) == 7  # all fit at 200x60
        times = [r.t for r in rows]
        assert times == sorted(times, reverse=True) and max(times) <= t  # newest first
        breakers = [(r.subject, r.dst, r.t) for r in rows if r.kind == "breaker"]
        # the gateway opened after the partner: it comes first, both read OPEN
        assert [(s, d) for s, d, _ in breakers] == [("gateway", "open"), ("partner", "open")]
        assert abs(breakers[0][2] - skus.gateway_open) < 0.05
        assert abs(breakers[1][2] - skus.partner_open) < 0.05
        alerts = [r for r in rows if r.kind == "alert"]
        assert alerts and all(r.reason == "firing" for r in alerts)
        lines = text_of(panel).splitlines()
        assert lines[0].startswith(fmt_t(rows[0].t))
        assert any("gateway" in ln and "OPEN" in ln for ln in lines)
        assert any("● queue_depth_high" in ln and "firing = 812" in ln for ln in lines)

    on_dashboard(skus.path, t, WIDE_TALL, check)


def test_events_keep_the_newest_that_fit(skus: Incident) -> None:
    """At the end of the run there are more notable events than lines: the panel shows the
    newest, exactly as many as its height, and its text never runs past it."""

    def check(app: MonitorApp) -> None:
        panel = app.screen.query_one(EventsPanel)
        height = panel.content_size.height
        everything = app.model.tasks.notable(skus.t_end, 10_000)
        assert len(everything) > height
        assert list(panel.rows) == everything[:height]
        assert len(rendered_lines(panel.render(), panel.content_size.width)) <= height

    on_dashboard(skus.path, skus.t_end, (120, 40), check)


def test_running_at_the_gateway_open_spell(skus: Incident) -> None:
    t = skus.gateway_open + 1

    def check(app: MonitorApp) -> None:
        panel = app.screen.query_one(RunningPanel)
        n = app.model.tasks.counts_at(t)["RUNNING"]
        assert n == 8
        assert panel.border_title == f"running 8 at {fmt_t(t)}"
        assert len(panel.rows) == 8 and {r.state for r in panel.rows} == {"RUNNING"}
        since = [r.since for r in panel.rows]
        assert since == sorted(since, reverse=True) and max(since) <= t  # newest first
        assert len({r.worker for r in panel.rows}) == 8  # one task per worker thread
        lines = text_of(panel).splitlines()
        assert [ln.split()[0] for ln in lines[:8]] == [r.task_id for r in panel.rows]
        assert lines[0].split()[1] == fmt_t(panel.rows[0].since)

    on_dashboard(skus.path, t, WIDE_TALL, check)


def test_nothing_running_at_the_end(skus: Incident) -> None:
    def check(app: MonitorApp) -> None:
        panel = app.screen.query_one(RunningPanel)
        assert panel.rows == ()
        assert panel.border_title == f"running 0 at {fmt_t(skus.t_end)}"
        assert text_of(panel).strip() == "no task running"

    on_dashboard(skus.path, skus.t_end, WIDE_TALL, check)


def test_the_panels_only_show_from_their_size(skus: Incident) -> None:
    """Events from 36 rows (or 150 columns), running from 150 columns: at 120x30 neither."""

    def check(app: MonitorApp) -> None:
        assert not app.screen.query_one(EventsPanel).region.area
        assert not app.screen.query_one(RunningPanel).region.area

    on_dashboard(skus.path, skus.gateway_open + 1, (120, 30), check)


# -- the widgets alone, at small sizes -----------------------------------------------------

def _event(k: int, reason: str = "429") -> HistoryRow:
    return HistoryRow(float(100 - k), "move", "RUNNING", "PENDING", f"retry 1/3: {reason}", 1,
                      "w1", None, None, f"task-{k}")


def _running(k: int) -> TaskRow:
    return TaskRow(f"task-{k}", "RUNNING", float(100 - k), 1, "b1", None, f"w{k}", "claim")


def _small(panel: EventsPanel | RunningPanel | OverviewPanel, height: int,
           width: int = 44) -> list[str]:
    """The panel's lines in a `width`x`height` box (border and padding take 4 columns and
    2 rows)."""

    class Probe(App[int]):
        CSS = f"""
        {type(panel).__name__} {{ width: {width}; height: {height}; border: round white;
                                padding: 0 1; }}
        """

        def compose(self) -> ComposeResult:
            yield panel

    out: list[str] = []

    async def main() -> None:
        async with Probe().run_test(size=(60, 20)) as pilot:
            await pilot.pause()
            out.extend(rendered_lines(panel.render(), panel.content_size.width))

    asyncio.run(main())
    return out


def test_events_cut_to_the_newest_lines() -> None:
    panel = EventsPanel()
    panel.rows = tuple(_event(k) for k in range(5))  # newest first, as notable() gives them
    lines = _small(panel, 4)
    assert len(lines) == 2
    assert lines[0].startswith("1:40.0") and "task-0" in lines[0]
    assert lines[1].startswith("1:39.0") and "task-1" in lines[1]


def test_a_long_event_wraps_and_the_wrap_counts_against_the_height() -> None:
    def panel() -> EventsPanel:
        p = EventsPanel()
        p.rows = (_event(0, "the partner answered 429 too many requests"), _event(1))
        return p

    lines = _small(panel(), 5, 30)  # 3 rows of 26 columns: the first event takes them all
    assert len(lines) == 3 and all(len(ln) <= 26 for ln in lines)
    assert "task-0" in lines[0] and not any("task-1" in ln for ln in lines)
    lines = _small(panel(), 8, 30)  # with 6 rows the older one shows under it (two lines)
    assert "task-1" in lines[-2] and sum("task-" in ln for ln in lines) == 2


def test_the_overview_shows_the_loop_lag_only_for_a_run_with_async_kinds() -> None:
    def overview(series: list[str], rows: list[list[float]]) -> OverviewPanel:
        model = TraceModel({"series": series, "meta": {"workers": 2}})
        model.add_samples(np.arange(float(len(rows))), np.array(rows))
        panel = OverviewPanel()
        panel.data = model.snapshot(float(len(rows) - 1)).overview
        return panel

    lagging = overview(["queue_depth", "running", "loop_lag"],
                       [[5, 2, 0.34], [3, 2, 0.012]])
    text = "\n".join(_small(lagging, 12, 60))
    assert "loop lag 12ms (max 340ms)" in text
    threads = overview(["queue_depth", "running"], [[5, 2], [3, 2]])
    assert "loop lag" not in "\n".join(_small(threads, 12, 60))


def test_running_cut_to_what_fits() -> None:
    panel = RunningPanel()
    panel.rows = tuple(_running(k) for k in range(6))
    lines = _small(panel, 5)
    assert [ln.split()[0] for ln in lines] == ["task-0", "task-1", "task-2"]
    assert lines[0].split()[1:] == ["1:40.0", "w0", "1"]


def test_before_events_are_loaded_the_panels_say_so() -> None:
    events, running = EventsPanel(), RunningPanel()
    events.known = running.known = False
    assert _small(events, 4) == ["once events are loaded"]
    assert _small(running, 4) == ["once events are loaded"]
    events = EventsPanel()
    events.quiet = "nothing notable while task-0 lived"
    assert _small(events, 4) == ["nothing notable while task-0 lived"]


def test_notable_from_a_lower_bound(skus: Incident) -> None:
    """What the task detail lists beside a task: notable events in [since, t] only."""

    def check(app: MonitorApp) -> None:
        tasks = app.model.tasks
        t, since = skus.gateway_open + 1, skus.partner_open + 0.5
        every = tasks.notable(t, 10_000)
        window = tasks.notable(t, 10_000, since)
        assert window == [r for r in every if r.t >= since]
        assert tasks.n_notable(t, since) == len(window) < len(every)
        assert all(r.subject != "partner" for r in window)  # it opened before `since`
        assert tasks.notable(t, 2, since) == window[:2]

    on_dashboard(skus.path, skus.gateway_open + 1, (80, 24), check)

