"""The `?` screen: every key, grouped the way htop and k9s users look for them.

Two columns side by side where the terminal is wide enough (80 columns are), one below the
other where not, so the whole list shows at 80x24 without scrolling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.quitting import QUIT_HELP

Keys = Sequence[tuple[str, Sequence[tuple[str, str]]]]

#: The trace monitor's keys: (group, ((key, what), ...)), in two columns of groups.
MONITOR_KEYS: tuple[Keys, Keys] = (
    (("playback", (("space", "play / pause / LIVE"), ("+ -", "speed x0.25 .. x1000"),
                   ("← →", "step (shift: x10)"), ("home end", "start / end (LIVE)"))),
     ("jump with :", ((":90 :1:30", "to a time"), (":+10 :-5", "forward / back"),
                      (":50%", "share of the run"), (":tasks :dash", "a view"),
                      (":ID", "a task or trace id")))),
    (("views", (("d t", "dashboard / tasks"), ("enter", "a task's history"),
                ("esc", "back, clear search"))),
     ("task table", (("/", "search task, trace ids"), ("0-6 s", "filter by state"),
                     ("↑↓ jk pgup pgdn", "scroll all tasks"), ("g G", "first / last task"),
                     ("< > I", "sort / reverse"))),
     ("app", (("T", "light / dark theme"), ("?", "this help"), *QUIT_HELP))),
)
#: The fleet view's keys.
FLEET_KEYS: tuple[Keys, Keys] = (
    (("views", (("b", "board: queue, batches"), ("w", "workers"),
                ("enter", "look a task up"), ("< > I", "sort running / reverse"),
                ("esc", "back"))),
     ("app", (("r", "poll the store now"), ("T", "light / dark theme"), ("?", "this help"),
              *QUIT_HELP))),
    (("find", (("/ :TEXT", "part of id, trace, kind, batch, key"),
               (":board :workers", "a view"),
               (":help :quit", ""))),
     ("workers view", (("threads", "its own, or seen"), ("busy", "tasks RUNNING now"),
                       ("heartbeat", "latest beat"), ("done errors", "attempts / failed"))),
     ),
)


def key_table(keys: Keys, width: int | None) -> Table:
    """One column of groups: the group as a reverse header, then key and what it does."""
    table = Table(box=None, show_header=False, padding=(0, 1), width=width)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for k, (group, rows) in enumerate(keys):
        if k:
            table.add_row("", "")
        table.add_row(Text(f" {group} ", "reverse"), "")
        for key, what in rows:
            table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """A modal key list; esc, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss_help", "close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help {
        width: auto; max-width: 100; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, keys: tuple[Keys, Keys] = MONITOR_KEYS, title: str = "keys") -> None:
        super().__init__()
        self.keys = keys
        self.title_text = title

    def compose(self) -> ComposeResult:
        yield Static(id="help")

    def on_mount(self) -> None:
        box = self.query_one("#help", Static)
        box.border_title = self.title_text
        box.border_subtitle = "esc close"
        self._layout()

    def on_resize(self) -> None:
        self._layout()

    def _layout(self) -> None:
        width = min(self.size.width, 100) - 4  # border and padding of #help
        left, right = self.keys
        if width >= 70:
            grid = Table.grid(padding=(0, 2))
            col = (width - 2) // 2
            grid.add_row(key_table(left, col), key_table(right, col))
            self.content: Table | Group = grid
        else:
            self.content = Group(key_table(left, width), Text(""), key_table(right, width))
        self.query_one("#help", Static).update(self.content)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
