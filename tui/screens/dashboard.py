"""The main view: every panel at the cursor's time, complete at 80x24, richer with room.

At 80x24 two columns: the run (queue and workers, downstreams, pools) and its effects
(business, batches, alerts), every number whole. More height draws more history (four charts
in the overview, a request-rate chart per downstream, waiters per pool) and, from `TALL`
rows, lists what just happened (breakers, alerts, failures, retries) under the alerts; from
`WIDE` columns a third column lists the tasks running at the cursor. Panels keep their
text; only the room for charts and lists changes.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical

from tui.fmt import fmt_t
from tui.screens.base import MonitorScreen
from tui.widgets.alerts import AlertPanel
from tui.widgets.batches import BatchPanel
from tui.widgets.business import BusinessPanel
from tui.widgets.downstreams import DownstreamPanel
from tui.widgets.events import EventsPanel
from tui.widgets.overview import OverviewPanel
from tui.widgets.pools import PoolPanel
from tui.widgets.running import RunningPanel

#: From this many columns, a third column lists notable events.
WIDE = 150
#: From this many rows, downstreams and pools draw their history under their numbers.
TALL = 36
#: Rows the business panel keeps for itself (numbers and a chart) before batches get theirs
#: (it keeps twelve when tall or wide).
BUSINESS_ROWS = 6
#: Rows the events list keeps when it shares the right column.
EVENTS_ROWS = 4


class DashboardScreen(MonitorScreen):
    """Two columns (three when wide): the run, its effects, and what just happened."""

    AUTO_FOCUS = None
    DEFAULT_CSS = """
    #dash { height: 1fr; }
    .dash-col { width: 1fr; height: 1fr; }
    #running-col, EventsPanel { display: none; }
    DashboardScreen.-wide #running-col { display: block; width: 1fr; height: 1fr; }
    DashboardScreen.-tall EventsPanel, DashboardScreen.-wide EventsPanel { display: block; }
    DashboardScreen.-tall BusinessPanel, DashboardScreen.-wide BusinessPanel { height: 14; }
    """

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
                yield EventsPanel()
            with Vertical(id="running-col"):
                yield RunningPanel()

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")
        tall = self.size.height >= TALL
        self.set_class(tall, "-tall")
        self.query_one(DownstreamPanel).chart_rows = 2 if tall else 0
        self.query_one(PoolPanel).chart_rows = 1 if tall else 0
        self.show()

    def show(self) -> None:
        if not self.is_mounted:
            return
        snap = self.model.snapshot(self.t)
        self.query_one(OverviewPanel).data = snap.overview
        self.query_one(DownstreamPanel).rows = snap.downstreams
        self.query_one(PoolPanel).rows = snap.pools
        self.query_one(BusinessPanel).data = snap.business
        alerts = self.query_one(AlertPanel)
        alerts.alerts, alerts.firing, alerts.known = (
            snap.alerts, snap.alerts_firing, snap.alerts_known)
        batches = self.query_one(BatchPanel)
        batches.max_lines = self._batch_lines(len(snap.alerts) if snap.alerts_known else 1)
        batches.rows = snap.batches
        batches.border_title = "batches" if all(b.final for b in snap.batches) \
            else f"batches · loading {self.model.loaded:.0%}"
        events = self.query_one(EventsPanel)
        if events.display:
            events.known = self.model.final_at(self.t)
            events.rows = tuple(self.model.tasks.notable(self.t, events.content_size.height))
        if self.has_class("-wide"):
            self._show_running()

    def _show_running(self) -> None:
        panel = self.query_one(RunningPanel)
        tasks = self.model.tasks
        sel = tasks.select(self.t, "RUNNING")
        panel.known = self.model.final_at(self.t)
        panel.border_title = f"running {len(sel)} at {fmt_t(self.t)}"
        panel.rows = tuple(tasks.rows(sel, 0, max(1, panel.content_size.height)))

    def _batch_lines(self, alert_lines: int) -> int:
        """Lines the batch list may take: what the right column leaves after the business
        panel's own rows, the alerts and the events list (each border takes two)."""
        body = self.query_one("#dash").size.height
        events = EVENTS_ROWS + 2 if self.has_class("-tall") or self.has_class("-wide") else 0
        business = 12 if self.has_class("-tall") or self.has_class("-wide") else BUSINESS_ROWS
        return max(2, body - (business + 2) - (max(1, alert_lines) + 2) - 2 - events)
