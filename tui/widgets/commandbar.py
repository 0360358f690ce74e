"""The k9s-style prompt at the bottom: `:` for a view, a time or a task, `/` for a search.

What you type is on screen as you type it, after the prompt's own `:` or `/`, with what it
finds on the right (the search's match count, or "no match"). Esc closes it; enter submits.
Below the prompt, `FilterLine` keeps an active search in view once the prompt is closed.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Static

from tui.commands import WORDS
from tui.messages import CommandEntered, PromptClosed, SearchChanged

HINTS = {":": "time 90 1:30 +10 50% · dash · tasks · a task or trace id",
         "/": "part of a task id or trace id"}


class CommandBar(Horizontal):
    """Hidden until opened; the mode character, the entry, and what the entry finds."""

    DEFAULT_CSS = """
    CommandBar { display: none; height: 1; background: $panel; }
    CommandBar.-open { display: block; }
    CommandBar > #prompt-mode { width: 2; padding: 0 0 0 1; text-style: bold; color: $accent; }
    CommandBar > Input, CommandBar > Input:focus {
        width: 1fr; height: 1; border: none; padding: 0; background: $panel;
    }
    CommandBar > #prompt-info { width: auto; max-width: 50%; padding: 0 1; color: $text-muted; }
    CommandBar > #prompt-info.-miss { color: $warning; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "cancel")]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = ":"

    def compose(self) -> ComposeResult:
        yield Label(":", id="prompt-mode")
        entry = Input(compact=True, id="prompt-entry", select_on_focus=False)
        entry.can_focus = False  # closed: keys belong to the screen, not to the prompt
        yield entry
        yield Label("", id="prompt-info")

    @property
    def entry(self) -> Input:
        return self.query_one("#prompt-entry", Input)

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    def open(self, mode: str, text: str = "") -> None:
        """Show the prompt in `mode` (":" or "/"), pre-filled with `text`."""
        self.mode = mode
        self.query_one("#prompt-mode", Label).update(mode)
        entry = self.entry
        entry.placeholder = HINTS.get(mode, "")
        entry.suggester = SuggestFromList(WORDS, case_sensitive=False) if mode == ":" else None
        with entry.prevent(Input.Changed):
            entry.value = text
        entry.cursor_position = len(text)
        self.show_info("")
        self.add_class("-open")
        entry.can_focus = True
        entry.focus()

    def show_info(self, text: str, miss: bool = False) -> None:
        """What the entry finds, on the right of the prompt (a count, or "no match")."""
        info = self.query_one("#prompt-info", Label)
        info.update(text)
        info.set_class(miss, "-miss")

    def action_close(self) -> None:
        self._close()
        self.post_message(PromptClosed(self.mode, cancelled=True))

    def _close(self) -> None:
        self.remove_class("-open")
        self.entry.can_focus = False
        self.screen.focus_next()

    @on(Input.Changed, "#prompt-entry")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.mode == "/":
            self.post_message(SearchChanged(event.value))

    @on(Input.Submitted, "#prompt-entry")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close()
        self.post_message(CommandEntered(self.mode, event.value))


class FilterLine(Static):
    """The active search, once the prompt is closed: `/sku-1  12 tasks  esc clears`."""

    DEFAULT_CSS = """
    FilterLine { height: 1; display: none; background: $panel; padding: 0 1; }
    FilterLine.-on { display: block; }
    """

    def show_filter(self, query: str, summary: str, miss: bool = False) -> None:
        if not query:
            self.remove_class("-on")
            return
        line = Text.assemble(("/", "bold"), (query, "bold"), "  ",
                             (summary, "yellow" if miss else "dim"), "  ",
                             ("esc clears", "dim"))
        self.update(line)
        self.add_class("-on")
