"""Per-batch progress: a bar, the batch's status, counts by state and p99.

Each batch gets one line, folded down to what the width holds without cutting a number:
first the status word goes, then the bar shrinks, then goes; only then does a batch wrap.
When there are more batches than the screen gives the panel (`max_lines`), the unfinished
ones come first and the rest are summed up in a last line.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from tui.fmt import fmt_num, fmt_pct, fmt_s, safe_text
from tui.trace_model import BatchRow
from tui.widgets.styling import Panel, flow, tone

#: Short labels for counts by state, in lifecycle order (one cell each).
SHORT = (("SUCCESS", "✓", "tf--good"), ("FAILED", "✗", "tf--bad"), ("TIMEOUT", "⧖", "tf--bad"),
         ("CANCELED", "⊘", "tf--dim"), ("RUNNING", "▶", "tf--warn"), ("PENDING", "○", "tf--accent"))
STATUS_TONE = {"RUNNING": "tf--warn", "ALL_SUCCESS": "tf--good", "PARTIAL_SUCCESS": "tf--warn",
               "FAILED": "tf--bad", "CANCELED": "tf--dim", "PENDING": "tf--accent"}
MIN_BAR = 4


class BatchPanel(Panel):
    """One line per batch, like Flower's task list, folded down to what fits."""

    DEFAULT_CSS = """
    BatchPanel { height: auto; }
    """
    rows: reactive[tuple[BatchRow, ...]] = reactive((), layout=True)
    max_lines: reactive[int] = reactive(0, layout=True)  # 0: as many as there are batches
    #: What an empty panel says (the fleet view reads a store, not a trace).
    empty_text = "no batches in this trace"

    def on_mount(self) -> None:
        self.border_title = "batches"

    def render(self) -> Text:
        if not self.rows:
            return Text(self.empty_text, tone(self, "tf--dim"))
        width = max(1, self.text_width)
        shown, rest = self._pick()
        name_w = max(safe_text(b.batch_id).cell_len for b in shown)
        tails = [self._tails(b) for b in shown]
        # one bar width for all lines (bars line up), from the longest tail that keeps a bar
        lines = [self._line(b, name_w, width, tails, k) for k, b in enumerate(shown)]
        if rest:
            done = sum(1 for b in rest if b.finished == b.total)
            lines.append(flow([Text(f"+{len(rest)} more ({done} done)", tone(self, "tf--dim")),
                               Text("t: task table", tone(self, "tf--dim"))], width))
        return Text("\n").join(lines)

    def _pick(self) -> tuple[list[BatchRow], list[BatchRow]]:
        rows = list(self.rows)
        if not self.max_lines or len(rows) <= self.max_lines:
            return rows, []
        order = sorted(range(len(rows)), key=lambda k: (rows[k].finished == rows[k].total, k))
        keep = sorted(order[: max(1, self.max_lines - 1)])
        return [rows[k] for k in keep], [rows[k] for k in order[len(keep):]]

    def _tails(self, b: BatchRow) -> tuple[Text, Text, Text, Text]:
        """Percent, status, counts, p99 of one batch."""
        pct = Text(f"{fmt_pct(b.finished / b.total if b.total else 0.0):>4}")
        status = Text(f"{b.label:<15}", tone(self, STATUS_TONE.get(b.label, "tf--dim")))
        return pct, status, self._counts(b), Text(f"p99 {fmt_s(b.p99)}")

    def _line(self, b: BatchRow, name_w: int, width: int,
              tails: list[tuple[Text, Text, Text, Text]], k: int) -> Text:
        """The most complete form of the batch's line that fits `width`: with the status
        word and a bar, then a bar only, then neither, then wrapped."""
        name = safe_text(b.batch_id)
        name.pad_right(name_w - name.cell_len)
        pct, status, counts, p99 = tails[k]
        for with_status in (True, False):
            longest = max(Text(" ").join([p, *([s] if with_status else []), c, q]).cell_len
                          for p, s, c, q in tails)
            bar_w = width - name_w - 2 - longest
            if bar_w >= MIN_BAR:
                tail = Text(" ").join([pct, *([status] if with_status else []), counts, p99])
                return Text.assemble(name, " ", self._bar(b, bar_w), " ", tail)
        line = Text(" ").join([name, pct, counts, p99])
        if line.cell_len <= width:
            return line
        return flow([name, pct, *counts.split(" "), p99], width, sep=" ")

    def _bar(self, b: BatchRow, w: int) -> Text:
        done = round((b.finished / b.total if b.total else 0.0) * w)
        bar = Text("█" * done, tone(self, STATUS_TONE.get(b.label, "tf--dim")))
        bar.append("░" * (w - done), tone(self, "tf--dim"))
        return bar

    def _counts(self, b: BatchRow) -> Text:
        """Counts by state with their marks; zeros left out except successes."""
        parts = [Text.assemble((mark, tone(self, style)), fmt_num(b.counts.get(state, 0)))
                 for state, mark, style in SHORT
                 if b.counts.get(state, 0) or state == "SUCCESS"]
        return Text(" ").join(parts)
