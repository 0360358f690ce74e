"""DB pools: connections in use against the pool's size, and who is waiting for one."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_num
from tui.trace_model import PoolRow
from tui.widgets.styling import Panel, chart, flow, tone

#: A gauge narrower than this is dropped (the numbers say it all).
MIN_GAUGE = 6


class PoolPanel(Panel):
    """A gauge per pool; a starved pool (anyone waiting) shows in the error colour. With
    `chart_rows` (set by the screen when there is height) the waiters over the run too."""

    DEFAULT_CSS = """
    PoolPanel { height: auto; }
    """
    #: Rows compare by their numbers, not their charts: redraw on every set, or a jump
    #: between two times with equal numbers keeps the chart of the first.
    rows: reactive[tuple[PoolRow, ...]] = reactive((), layout=True, always_update=True)
    chart_rows: reactive[int] = reactive(0, layout=True)

    def on_mount(self) -> None:
        self.border_title = "db pools"

    def render(self) -> Text:
        if not self.rows:
            return Text("no pools in this trace", tone(self, "tf--dim"))
        width = max(1, self.text_width)
        name_w = max(len(r.name) for r in self.rows)
        tails = [self._tail(r) for r in self.rows]
        gauge_w = width - name_w - 2 - max(t.cell_len for t in tails)
        out = Text()
        for k, (r, tail) in enumerate(zip(self.rows, tails, strict=True)):
            if k:
                out.append("\n")
            if gauge_w >= MIN_GAUGE:
                line = Text(f"{r.name:<{name_w}} ")
                line.append_text(self._gauge(r, gauge_w))
                line.append(" ")
                line.append_text(tail)
                out.append_text(line)
            else:
                out.append_text(flow([Text(r.name), tail], width))
            if self.chart_rows and r.waiting_chart is not None:
                chart(out, self, "wait", r.waiting_chart, width, self.chart_rows, "tf--bad")
        return out

    def _gauge(self, r: PoolRow, w: int) -> Text:
        frac = 0.0 if not r.size else min(1.0, (r.in_use or 0) / r.size)
        full = round(frac * w)
        gauge = Text("█" * full, tone(self, "tf--bad" if r.waiting else "tf--accent"))
        gauge.append("░" * (w - full), tone(self, "tf--dim"))
        return gauge

    def _tail(self, r: PoolRow) -> Text:
        wait = Text(f"wait {fmt_num(r.waiting)}")
        if r.waiting:
            wait.stylize(tone(self, "tf--bad"))
        return Text.assemble(f"{fmt_num(r.in_use)}/{fmt_num(r.size)} ", wait)
