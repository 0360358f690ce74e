"""Queue depth and running-vs-limit as charts over the run, plus throughput and success rate
(and the event loop's lag when the run has async kinds).

The height decides how much history is drawn, not how tall the bars get: two charts at
80x24 (queue, running), four with room (throughput and success rate over the run too).
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_num, fmt_pct, fmt_s
from tui.trace_model import Overview, bars, fit
from tui.widgets.styling import Panel, append_runs, flow, tone

LABEL = 12  # "queue 1.00M " / "run  50/50  "
#: Content rows from which a third and a fourth chart are drawn.
THIRD_CHART_ROWS, FOURTH_CHART_ROWS = 14, 19
#: A loop lag shown as bad: the lag from which the worker names the blocking task.
LOOP_LAG_BAD_S = 0.1


class OverviewPanel(Panel):
    """The run's vital charts; red where running is at or above its limit."""

    DEFAULT_CSS = """
    OverviewPanel { height: 1fr; min-height: 5; }
    """
    data: reactive[Overview | None] = reactive(None, layout=False)

    def on_mount(self) -> None:
        self.border_title = "queue · workers"

    def render(self) -> Text:
        d = self.data
        if d is None:
            return Text("no timeline yet", tone(self, "tf--dim"))
        width = max(4, self.text_width - LABEL)
        footer = self._footer(d)
        room = max(2, self.content_size.height - len(footer.plain.splitlines()))
        charts = self._charts(d, room)
        heights = _split(room, [share for *_, share in charts])
        out = Text()
        for (label, values, top, limit, _), h in zip(charts, heights, strict=True):
            self._chart(out, label, fit(values, width), h, top,
                        None if limit is None else fit(limit, width))
        out.append_text(footer)
        return out

    def _charts(self, d: Overview, room: int) -> list[tuple[str, np.ndarray, float | None,
                                                            np.ndarray | None, int]]:
        lim = d.limit_chart
        top = float(np.nanmax(lim)) if len(lim) and not np.isnan(lim).all() else None
        run = fmt_num(d.running) + ("" if d.running_limit is None
                                    else f"/{fmt_num(d.running_limit)}")
        charts = [(f"queue {fmt_num(d.queue_depth)}", d.queue_chart, None, None, 4),
                  (f"run {run}", d.running_chart, top, lim, 2)]
        if room >= THIRD_CHART_ROWS and d.throughput_chart is not None:
            charts.append((f"thru {fmt_num(d.throughput, 1)}/s", d.throughput_chart, None,
                           None, 2))
        if room >= FOURTH_CHART_ROWS and d.success_chart is not None:
            charts.append((f"ok {fmt_pct(d.success_rate)}", d.success_chart, 1.0, None, 2))
        return charts

    def _footer(self, d: Overview) -> Text:
        wide = self.text_width >= 44
        ok = fmt_pct(d.success_rate, 1 if wide else 0)
        done = sum(v or 0 for v in d.done.values())
        rate_tone = "tf--good" if (d.success_rate or 1) >= 0.95 else "tf--bad"
        parts = [Text.assemble("thru " if wide else "",
                               (f"{fmt_num(d.throughput, 1)}/s", tone(self, "tf--accent"))),
                 Text.assemble("ok ", (ok, tone(self, rate_tone))),
                 Text(f"done {fmt_num(done)}/{fmt_num(d.submitted)}")]
        if d.loop_lag is not None or d.loop_lag_max is not None:  # a run with async kinds
            parts.append(self._loop_lag(d))
        return flow(parts, max(1, self.text_width))

    def _loop_lag(self, d: Overview) -> Text:
        """`loop lag 12ms (max 340ms)`, red while the loop is late by over 100 ms (the
        worker names the blocking task in its log from there)."""
        late = (d.loop_lag or 0.0) > LOOP_LAG_BAD_S
        return Text.assemble("loop lag ", (fmt_s(d.loop_lag),
                                           tone(self, "tf--bad" if late else "tf--accent")),
                             f" (max {fmt_s(d.loop_lag_max)})")

    def _chart(self, out: Text, label: str, values: np.ndarray, height: int,
               top: float | None, limit: np.ndarray | None = None) -> None:
        rows = bars(values, height, top)
        over = np.zeros(len(values), bool)
        if limit is not None:
            with np.errstate(invalid="ignore"):
                over = values >= limit
        cold, warm = tone(self, "tf--accent"), tone(self, "tf--bad")
        for k, row in enumerate(rows):
            out.append(f"{label if k == 0 else '':<{LABEL}}"[:LABEL])
            append_runs(out, row, over, cold, warm)
            out.append("\n")


def _split(room: int, shares: list[int]) -> list[int]:
    """Rows per chart in proportion to `shares`, each at least one, summing to `room`."""
    total = sum(shares)
    out = [max(1, room * s // total) for s in shares]
    out[0] += room - sum(out)
    return out
