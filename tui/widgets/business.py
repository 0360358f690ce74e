"""The business side: its latency p99 against the SLO, timeouts, and the gateway's breaker."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_num, fmt_s, fmt_wait
from tui.trace_model import Business, bars, fit, log_scale
from tui.widgets.styling import Panel, append_runs, breaker_text, first_fit, flow, tone

LABEL = 6  # "30.0s " above the chart's top row, "log" by its bottom


class BusinessPanel(Panel):
    """What the batch did to everyone else: the reason the incident was an incident. Rows
    the numbers leave free draw p99 over the run (the SLO is the chart's top when higher)."""

    DEFAULT_CSS = """
    BusinessPanel { height: 1fr; min-height: 5; }
    """
    data: reactive[Business | None] = reactive(None, layout=False)

    def on_mount(self) -> None:
        self.border_title = "business"

    def render(self) -> Text:
        d = self.data
        width = max(1, self.text_width)
        if d is None or not d.present:
            return Text("no business traffic in this trace", tone(self, "tf--dim"))
        bad = tone(self, "tf--bad" if d.slo_broken else "tf--good")
        verdict = []
        if d.slo_p99 is not None and d.p99 is not None:
            verdict = [Text("✗ broken" if d.slo_broken else "✓ ok", bad)]
        breaker = breaker_text(self, d.breaker, d.reopen_in)
        out = first_fit([Text.assemble("gateway ", breaker)], width,
                        [Text.assemble("gateway ", breaker_text(self, d.breaker)),
                         Text(f"half-open in {fmt_wait(d.reopen_in)}", tone(self, "tf--dim"))
                         if d.reopen_in is not None and d.breaker == "open" else Text()])
        out.append("\n")
        out.append_text(flow([Text.assemble("p99 ", (fmt_s(d.p99), bad)),
                              Text(f"SLO {fmt_s(d.slo_p99)}"), *verdict], width))
        out.append("\n")
        out.append_text(flow([Text(f"p50 {fmt_s(d.p50)}"),
                              Text(f"timeouts {fmt_num(d.timeouts)}")], width))
        extra = self.content_size.height - len(out.plain.splitlines())
        if extra > 0:
            self._chart(out, d, width, extra)
        return out

    def _chart(self, out: Text, d: Business, width: int, rows: int) -> None:
        """p99 over the run on a log scale (30 s next to 120 ms), red above the SLO."""
        values = fit(d.p99_chart, max(1, width - LABEL))
        finite = values[~np.isnan(values)]
        if not len(finite):
            return
        floor = max(1e-3, min(float(finite[finite > 0].min(initial=1.0)), d.slo_p99 or 1.0) / 2)
        top = max(float(finite.max()), d.slo_p99 or 0.0)
        scaled = log_scale(values, floor)
        with np.errstate(invalid="ignore"):
            hot = values > (d.slo_p99 if d.slo_p99 is not None else np.inf)
        labels = {0: fmt_s(top), rows - 1: "log"}
        cold, warm = tone(self, "tf--accent"), tone(self, "tf--bad")
        for k, row in enumerate(bars(scaled, rows, float(log_scale(np.array([top]), floor)[0]))):
            out.append("\n" + f"{labels.get(k, ''):<{LABEL}}", tone(self, "tf--dim"))
            append_runs(out, row, hot, cold, warm)
