"""SVG snapshots of every screen (the fleet's task lookup and help too) at 80x24 and
120x40: purpose-built apps, fixed traces and a fixed store, fixed sizes.

Regenerate after an intended change with `pytest tests/tui/test_snapshots.py
--snapshot-update` and review the SVGs in the diff (they open in a browser).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from taskfuse.store.memory import MemoryStore
from tests.tui.fleetgen import NOW, fill_fleet
from tests.tui.tracegen import Incident, write_incident_trace
from tui.app import MonitorApp, create_app
from tui.fleet_app import FleetApp

Compare = Callable[..., bool]
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
#: Each screen: the keys that lead to it from the dashboard at the gateway's open spell.
SCREENS = {
    "dashboard": (),
    "tasks": ("t",),
    "task_detail": ("colon", *"skus-5", "enter"),
    "help": ("question_mark",),
    "prompt_typed": ("colon", *"1:30"),
    "search_match": ("slash", *"sku-1"),
    "search_no_match": ("slash", *"sku-zz"),
}


async def _tables_measured(pilot: Pilot[int]) -> None:
    """Pause until every table on the screen has measured its latest rows.

    A DataTable sizes its columns from new rows on its next idle event, which a loaded
    machine can delay past a few pauses: one full-suite run beside another caught the task
    column still as wide as the previous page's ids (`skus-19` for `skus-195`).
    """
    for _ in range(200):
        await pilot.pause()
        tables = pilot.app.screen.query(DataTable)
        if not any(getattr(t, "_require_update_dimensions", False)
                   or getattr(t, "_updated_cells", None) for t in tables):
            break
    await pilot.pause()  # and drawn with the new widths


def _at(t: float, *keys: str) -> Callable[[Pilot[int]], Awaitable[None]]:
    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, MonitorApp)
        await app.wait_idle()
        app.seek(t)
        if keys:
            await pilot.press(*keys)
        await app.wait_idle()  # a keystroke may start a load round, and a screen's first
        for box in app.screen.query(Input):  # a blinking cursor is drawn on or off by
            box.cursor_blink = False  # when the picture is taken: held on, it is stable
        await pilot.pause()  # draw comes one refresh after it is pushed
        await _tables_measured(pilot)

    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", list(SCREENS))
def test_monitor(snap_compare: Compare, skus: Incident, screen: str,
                 size: tuple[int, int]) -> None:
    theme = "light" if screen == "dashboard" and size == (120, 40) else None
    app = create_app(skus.path, theme=theme)
    assert snap_compare(app, terminal_size=size,
                        run_before=_at(skus.gateway_open + 1, *SCREENS[screen]))


def _fleet() -> FleetApp:
    store = MemoryStore()
    fill_fleet(store)
    return FleetApp(store, "postgresql://ops:secret@db.internal:5432/tasks?schema=taskfuse",
                    poll_s=3600, clock=lambda: NOW)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("keys", [pytest.param((), id="board"),
                                  pytest.param(("w",), id="workers"),
                                  pytest.param(("enter",), id="task"),
                                  pytest.param(("question_mark",), id="help")])
def test_fleet(snap_compare: Compare, keys: tuple[str, ...], size: tuple[int, int]) -> None:
    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, FleetApp)
        await app.wait_idle()
        await pilot.press(*keys)
        await app.wait_idle()
        await _tables_measured(pilot)

    assert snap_compare(_fleet(), terminal_size=size, run_before=run_before)


def test_fixed_run_dashboard_at_the_same_time(snap_compare: Compare, incident: Incident,
                                              fixed: Incident) -> None:
    app = create_app(fixed.path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_at(incident.gateway_open + 1))


def test_follow_view_stalled(snap_compare: Compare, tmp_path: Path) -> None:
    """A followed run that stopped growing: the time bar says so instead of freezing."""
    live = write_incident_trace(tmp_path / "live.trace", complete=False)  # no footer yet
    now = [0.0]
    app: App[int] = create_app(live.path, follow=True, clock=lambda: now[0], poll_s=3600)

    async def run_before(pilot: Pilot[int]) -> None:
        assert isinstance(pilot.app, MonitorApp)
        await pilot.app.wait_idle()
        now[0] = 42.0
        pilot.app.poll_now()
        await pilot.app.wait_idle()
        await _tables_measured(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
