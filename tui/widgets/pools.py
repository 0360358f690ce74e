"""DB pools: connections in use against the pool's size, and who is waiting for one."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive

from tui.model import PoolRow, fmt_num
from tui.widgets.styling import Panel, tone


class PoolPanel(Panel):
    """A gauge per pool; a starved pool (anyone waiting) shows in the error colour."""

    DEFAULT_CSS = """
    PoolPanel { height: auto; }
    """
    rows: reactive[tuple[PoolRow, ...]] = reactive((), layout=True)

    def on_mount(self) -> None:
        self.border_title = "db pools"

    def render(self) -> Table | Text:
        if not self.rows:
            return Text("no pools in this trace", tone(self, "tf--dim"))
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column("name", no_wrap=True)
        table.add_column("gauge", ratio=1, no_wrap=True)
        table.add_column("use", justify="right", no_wrap=True)
        table.add_column("wait", justify="right", no_wrap=True)
        gauge_w = max(4, self.content_size.width - 28)
        for r in self.rows:
            starving = bool(r.waiting)
            frac = 0.0 if not r.size else min(1.0, (r.in_use or 0) / r.size)
            full = round(frac * gauge_w)
            gauge = Text("█" * full, tone(self, "tf--bad" if starving else "tf--accent"))
            gauge.append("░" * (gauge_w - full), tone(self, "tf--dim"))
            wait = Text(f"wait {fmt_num(r.waiting)}")
            if starving:
                wait.stylize(tone(self, "tf--bad"))
            table.add_row(r.name, gauge, f"{fmt_num(r.in_use)}/{fmt_num(r.size)}", wait)
        return table
