"""The main view: every panel at the cursor's time, laid out to fit 80x24 and grow beyond."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical

from tui.screens.base import MonitorScreen
from tui.widgets.alerts import AlertPanel
from tui.widgets.batches import BatchPanel
from tui.widgets.business import BusinessPanel
from tui.widgets.downstreams import DownstreamPanel
from tui.widgets.overview import OverviewPanel
from tui.widgets.pools import PoolPanel


class DashboardScreen(MonitorScreen):
    """Two columns: the run (queue, downstreams, pools) and its effects (business, batches,
    alerts)."""

    AUTO_FOCUS = None

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="dash"):
            with Vertical(classes="dash-col"):
                yield OverviewPanel()
                yield DownstreamPanel()
                yield PoolPanel()
            with Vertical(classes="dash-col"):
                yield BusinessPanel()
                yield BatchPanel()
                yield AlertPanel()

    def show(self) -> None:
        snap = self.model.snapshot(self.t)
        self.query_one(OverviewPanel).data = snap.overview
        self.query_one(DownstreamPanel).rows = snap.downstreams
        self.query_one(PoolPanel).rows = snap.pools
        self.query_one(BusinessPanel).data = snap.business
        self.query_one(BatchPanel).rows = snap.batches
        alerts = self.query_one(AlertPanel)
        alerts.alerts, alerts.firing, alerts.known = (
            snap.alerts, snap.alerts_firing, snap.alerts_known)
