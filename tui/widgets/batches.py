"""Per-batch progress: a bar, the derived batch status, counts by state and p99."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.model import BatchRow, fmt_num, fmt_s
from tui.widgets.styling import Panel, tone

#: Short labels for counts by state, in lifecycle order.
SHORT = (("SUCCESS", "✓", "tf--good"), ("FAILED", "✗", "tf--bad"), ("TIMEOUT", "⏱", "tf--bad"),
         ("CANCELED", "⊘", "tf--dim"), ("RUNNING", "▶", "tf--warn"), ("PENDING", "…", "tf--accent"))
STATUS_TONE = {"RUNNING": "tf--warn", "ALL_SUCCESS": "tf--good", "PARTIAL_SUCCESS": "tf--warn",
               "FAILED": "tf--bad", "CANCELED": "tf--dim"}


class BatchPanel(Panel):
    """One line per batch, like Flower's task list, folded down to what fits 80 columns."""

    DEFAULT_CSS = """
    BatchPanel { height: auto; }
    """
    rows: reactive[tuple[BatchRow, ...]] = reactive((), layout=True)

    def on_mount(self) -> None:
        self.border_title = "batches"

    def render(self) -> Text:
        if not self.rows:
            return Text("no batches in this trace", tone(self, "tf--dim"))
        width = self.content_size.width
        name_w = max(len(b.batch_id) for b in self.rows)
        tails = [self._tail(b, width) for b in self.rows]
        bar_w = max(3, width - name_w - 1 - max(t.cell_len for t in tails))
        out = Text()
        for k, (b, tail) in enumerate(zip(self.rows, tails, strict=True)):
            frac = b.finished / b.total if b.total else 0.0
            status = b.status.value if b.status else "EMPTY"
            done = round(frac * bar_w)
            line = Text(f"{b.batch_id:<{name_w}} ")
            line.append("█" * done, tone(self, STATUS_TONE.get(status, "tf--dim")))
            line.append("░" * (bar_w - done), tone(self, "tf--dim"))
            line.append_text(tail)
            line.truncate(width)
            out.append_text(line)
            if k < len(self.rows) - 1:
                out.append("\n")
        return out

    def _tail(self, b: BatchRow, width: int) -> Text:
        """Percent, status (when wide), counts by state and p99, in that order."""
        frac = b.finished / b.total if b.total else 0.0
        status = b.status.value if b.status else "EMPTY"
        tail = Text(f" {frac:>4.0%}")
        if width >= 70:
            tail.append(f" {status:<15}", tone(self, STATUS_TONE.get(status, "tf--dim")))
        for state, mark, style in SHORT:
            n = b.counts.get(state, 0)
            if n or state in ("SUCCESS", "PENDING"):
                tail.append(f" {mark}{fmt_num(n)}", tone(self, style))
        tail.append(f" p99 {fmt_s(b.p99)}")
        return tail
