"""Each downstream: breaker state, time until half-open, in flight vs bulkhead, rate, 429s."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive

from tui.model import DownstreamRow, fmt_num
from tui.widgets.styling import Panel, breaker_text, tone


class DownstreamPanel(Panel):
    """One row per downstream; the breaker cell is what an incident review looks at first."""

    DEFAULT_CSS = """
    DownstreamPanel { height: auto; }
    """
    rows: reactive[tuple[DownstreamRow, ...]] = reactive((), layout=True)

    def on_mount(self) -> None:
        self.border_title = "downstreams"

    def render(self) -> Table | Text:
        if not self.rows:
            return Text("no downstreams in this trace", tone(self, "tf--dim"))
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column("name", ratio=1, no_wrap=True, overflow="ellipsis")
        table.add_column("breaker", no_wrap=True)
        table.add_column("in flight", justify="right", no_wrap=True)
        table.add_column("rps", justify="right", no_wrap=True)
        table.add_column("429", justify="right", no_wrap=True)
        for r in self.rows:
            limit = "∞" if r.limit is None else fmt_num(r.limit)
            busy = r.in_flight is not None and r.limit is not None and r.in_flight >= r.limit
            flight = Text(f"{fmt_num(r.in_flight)}/{limit}",
                          tone(self, "tf--warn" if busy else "tf--accent"))
            r429 = Text(f"429 {fmt_num(r.r429)}")
            if r.r429_rate:
                r429.append(f" +{r.r429_rate:.0f}/s", tone(self, "tf--bad"))
            table.add_row(r.name, breaker_text(self, r.breaker, r.reopen_in), flight,
                          f"{fmt_num(r.rps, 1)}rps", r429)
        return table
