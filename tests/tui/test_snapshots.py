"""SVG snapshots of the main screens: purpose-built app states, a fixed trace, a fixed size.

Regenerate after an intended change with `pytest tests/tui/test_snapshots.py
--snapshot-update` and review the SVGs in the diff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.pilot import Pilot

from tests.tui.tracegen import Incident, write_incident_trace
from tui.app import MonitorApp, create_app

Compare = Callable[..., bool]


def _at(t: float, *keys: str) -> Callable[[Pilot[int]], Awaitable[None]]:
    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, MonitorApp)
        await app.wait_idle()
        app.seek(t)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return run_before


def test_incident_dashboard_while_the_gateway_is_open(snap_compare: Compare,
                                                      incident: Incident) -> None:
    app = create_app(incident.path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_at(incident.gateway_open + 1))


def test_fixed_run_dashboard_at_the_same_time(snap_compare: Compare, incident: Incident,
                                              fixed: Incident) -> None:
    app = create_app(fixed.path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_at(incident.gateway_open + 1))


def test_incident_dashboard_large_light(snap_compare: Compare, incident: Incident) -> None:
    app = create_app(incident.path, theme="light")
    assert snap_compare(app, terminal_size=(120, 36), run_before=_at(incident.partner_open + 2))


def test_task_table_filtered_to_failed(snap_compare: Compare, incident: Incident) -> None:
    app = create_app(incident.path)
    assert snap_compare(app, terminal_size=(100, 24), run_before=_at(incident.t_end, "t", "4"))


def test_follow_view_stalled(snap_compare: Compare, tmp_path: Path) -> None:
    """A followed run that stopped growing: the time bar says so instead of freezing."""
    live = write_incident_trace(tmp_path / "live.trace", complete=False)  # no footer yet
    now = [0.0]
    app = create_app(live.path, follow=True, clock=lambda: now[0], poll_s=3600)

    async def run_before(pilot: Pilot[int]) -> None:
        assert isinstance(pilot.app, MonitorApp)
        await pilot.app.wait_idle()
        now[0] = 42.0
        pilot.app.poll_now()
        await pilot.app.wait_idle()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
