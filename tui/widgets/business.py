"""The business side: its latency p99 against the SLO, timeouts, and the gateway's breaker."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.model import Business, bars, fit, fmt_num, fmt_s
from tui.widgets.styling import Panel, breaker_text, tone


class BusinessPanel(Panel):
    """What the batch did to everyone else: the reason the incident was an incident."""

    DEFAULT_CSS = """
    BusinessPanel { height: auto; min-height: 4; }
    """
    data: reactive[Business | None] = reactive(None, layout=False)

    def on_mount(self) -> None:
        self.border_title = "business"

    def render(self) -> Text:
        d = self.data
        if d is None or not d.present:
            return Text("no business traffic in this trace", tone(self, "tf--dim"))
        out = Text("gateway ")
        out.append_text(breaker_text(self, d.breaker))
        out.append("\np99 ")
        out.append(fmt_s(d.p99), tone(self, "tf--bad" if d.slo_broken else "tf--good"))
        out.append(f" / SLO {fmt_s(d.slo_p99)} ")
        if d.slo_p99 is not None and d.p99 is not None:
            out.append("✗ broken" if d.slo_broken else "✓ ok",
                       tone(self, "tf--bad" if d.slo_broken else "tf--good"))
        out.append(f"\np50 {fmt_s(d.p50)}  timeouts {fmt_num(d.timeouts)}")
        extra = self.content_size.height - 3
        if extra > 0:
            top = max(d.slo_p99 or 0, *(v for v in d.p99_chart if v == v), 0.0) or None
            for row in bars(fit(d.p99_chart, self.content_size.width), extra, top):
                out.append("\n" + row, tone(self, "tf--accent"))
        return out
