"""The `?` screen: every key, grouped the way htop and k9s users look for them."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("playback", (("space", "play / pause"), ("+ / -", "faster / slower (x0.25 .. x1000)"),
                  ("← / →", "step back / forward"), ("shift+← / →", "ten steps"),
                  ("home / end", "start / end (end follows a live run)"))),
    ("views", ((":", "jump: a time (90, 1:30, +10, 50%) or a view (dash, tasks, task ID)"),
               ("t / d", "task table / dashboard"), ("/", "search tasks by task_id or trace_id"),
               ("0-6, s", "task table: filter by state, cycle states"),
               ("enter", "task table: the task's whole history"), ("esc", "back"))),
    ("app", (("T", "light / dark theme"), ("?", "this help"), ("q", "quit"))),
)


class HelpScreen(ModalScreen[None]):
    """A modal key list; esc, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss_help", "close"),
    ]

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for group, keys in KEYS:
            table.add_row(f"[reverse] {group} [/]", "")
            for key, what in keys:
                table.add_row(key, what)
        yield Static(table, id="help")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
