"""Each downstream: breaker state, time until half-open, in flight vs bulkhead, rate, 429s."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_num
from tui.trace_model import DownstreamRow
from tui.widgets.styling import Panel, breaker_text, chart, flow, tone


class DownstreamPanel(Panel):
    """One entry per downstream, flowed onto as many lines as the width needs (never cut);
    with `chart_rows` (set by the screen when there is height) its request rate over the
    run is drawn under it."""

    DEFAULT_CSS = """
    DownstreamPanel { height: auto; }
    """
    #: Rows compare by their numbers, not their charts: redraw on every set, or a jump
    #: between two times with equal numbers keeps the chart of the first.
    rows: reactive[tuple[DownstreamRow, ...]] = reactive((), layout=True, always_update=True)
    chart_rows: reactive[int] = reactive(0, layout=True)

    def on_mount(self) -> None:
        self.border_title = "downstreams"

    def render(self) -> Text:
        if not self.rows:
            return Text("no downstreams in this trace", tone(self, "tf--dim"))
        width = max(1, self.text_width)
        out = Text()
        for k, r in enumerate(self.rows):
            if k:
                out.append("\n")
            out.append_text(flow(self._parts(r, width), width))
            if self.chart_rows and r.rps_chart is not None:
                chart(out, self, "rps", r.rps_chart, width, self.chart_rows, "tf--accent")
        return out

    def _parts(self, r: DownstreamRow, width: int) -> list[Text]:
        limit = "∞" if r.limit is None else fmt_num(r.limit)
        busy = r.in_flight is not None and r.limit is not None and r.in_flight >= r.limit
        flight = Text.assemble((f"{fmt_num(r.in_flight)}/{limit}",
                                tone(self, "tf--warn" if busy else "tf--accent")), " in flight")
        r429 = Text(f"429 {fmt_num(r.r429)}")
        if r.r429_rate:
            r429.append(f" +{r.r429_rate:.0f}/s", tone(self, "tf--bad"))
        parts = [Text.assemble((r.name, "bold"), " ", breaker_text(self, r.breaker, r.reopen_in)),
                 flight, Text(f"{fmt_num(r.rps, 1)} rps"), r429]
        if r.errors:
            parts.append(Text(f"err {fmt_num(r.errors)}", tone(self, "tf--bad")))
        return parts
