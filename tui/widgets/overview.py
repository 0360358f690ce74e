"""Queue depth and running-vs-limit as charts over the run, plus throughput and success rate."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive

from tui.model import Overview, bars, fit, fmt_num
from tui.widgets.styling import Panel, tone

LABEL = 11  # "queue 1234 " / "run  50/50 "


class OverviewPanel(Panel):
    """The run's two vital charts; red where running is at or above its limit."""

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
        width = max(4, self.content_size.width - LABEL)
        room = max(2, self.content_size.height - 1)
        queue_h = max(1, room * 2 // 3)  # the queue is the story; running is near its cap
        out = Text()
        q = fit(d.queue_chart, width)
        self._chart(out, f"queue {fmt_num(d.queue_depth)}", q, queue_h, None)
        run = fit(d.running_chart, width)
        lim = fit(d.limit_chart, width)
        top = float(np.nanmax(lim)) if not np.isnan(lim).all() else None
        used = f"{fmt_num(d.running)}/{fmt_num(d.running_limit)}"
        self._chart(out, f"run {used}", run, max(1, room - queue_h), top, lim)
        wide = self.content_size.width >= 44
        ok = "–" if d.success_rate is None else f"{d.success_rate:.{1 if wide else 0}%}"
        done = sum(v or 0 for v in d.done.values())
        out.append("thru " if wide else "")
        out.append(f"{fmt_num(d.throughput, 1)}/s", tone(self, "tf--accent"))
        out.append("  ok ")
        rate_tone = "tf--good" if (d.success_rate or 1) >= 0.95 else "tf--bad"
        out.append(ok, tone(self, rate_tone))
        out.append(f"  done {fmt_num(done)}/{fmt_num(d.submitted)}")
        return out

    def _chart(self, out: Text, label: str, values: np.ndarray, height: int,
               top: float | None, limit: np.ndarray | None = None) -> None:
        rows = bars(values, height, top)
        over = np.zeros(len(values), bool)
        if limit is not None:
            with np.errstate(invalid="ignore"):
                over = values >= limit
        for k, row in enumerate(rows):
            out.append(f"{label if k == 0 else '':<{LABEL}}"[:LABEL])
            for ch, hot in zip(row, over, strict=True):
                out.append(ch, tone(self, "tf--bad" if hot else "tf--accent"))
            out.append("\n")
