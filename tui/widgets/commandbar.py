"""The k9s-style prompt at the bottom: `:` for a view or a time, `/` for a search."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.widgets import Input

from tui.messages import CommandEntered


class CommandBar(Input):
    """Hidden until opened; submitting posts `CommandEntered` and hides it again."""

    DEFAULT_CSS = """
    CommandBar { dock: bottom; display: none; height: 1; border: none; padding: 0 1; }
    CommandBar.-open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "close", show=False)]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = ":"
        self.can_focus = False  # closed: keys belong to the screen, not to the prompt

    def open(self, mode: str, text: str = "") -> None:
        """Show the prompt in `mode` (":" or "/"), pre-filled with `text`."""
        self.mode = mode
        self.placeholder = "time (90, 1:30, +10, 50%) or view (dash, tasks, task ID)" \
            if mode == ":" else "task_id or trace_id"
        self.value = text
        self.add_class("-open")
        self.can_focus = True
        self.focus()

    def action_close(self) -> None:
        self.remove_class("-open")
        self.can_focus = False
        self.screen.focus_next()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_close()
        self.post_message(CommandEntered(self.mode, event.value))
