"""Every message of the monitor, in one place: events go up, data comes down as attributes.

Two kinds travel here. Loading messages are posted by the worker thread that reads the
trace (the only thing a thread ever does to the UI). User-intent messages are posted by
widgets and screens and handled by the app, which owns the cursor and the data.
"""

from __future__ import annotations

from textual.message import Message

from tui.sources import Delta
from tui.taskindex import EventChunk


class TraceGrew(Message):
    """New timeline rows (and maybe the footer) were read from the trace."""

    def __init__(self, delta: Delta) -> None:
        super().__init__()
        self.delta = delta


class EventsDecoded(Message):
    """One more event frame was decoded; `pending` frames (`pending_bytes`) remain."""

    def __init__(self, chunk: EventChunk, pending: int, pending_bytes: int = 0) -> None:
        super().__init__()
        self.chunk = chunk
        self.pending = pending
        self.pending_bytes = pending_bytes


class PumpFinished(Message):
    """The loading thread finished one round (all pending frames decoded, or it failed)."""


class SourceStalled(Message):
    """A followed trace has not grown for `seconds`; only the latest one matters."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SourceStalled)


class SourceFailed(Message):
    """Reading the trace failed after it was opened (a corrupt frame, a vanished file)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class CommandEntered(Message):
    """The command line was submitted: `mode` is ":" (view or time) or "/" (search)."""

    def __init__(self, mode: str, text: str) -> None:
        super().__init__()
        self.mode = mode
        self.text = text


class SearchChanged(Message):
    """The `/` prompt's text changed (incremental search); only the latest one matters."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SearchChanged)


class PromptClosed(Message):
    """The prompt was closed with esc (nothing submitted)."""

    def __init__(self, mode: str, cancelled: bool = True) -> None:
        super().__init__()
        self.mode = mode
        self.cancelled = cancelled


class PageMove(Message):
    """The task table's cursor went past its page: move the window by `rows` (or to the
    first / last row with `to`)."""

    def __init__(self, rows: int = 0, to: str | None = None) -> None:
        super().__init__()
        self.rows = rows
        self.to = to


class TaskChosen(Message):
    """A task was picked for the drill-down (enter on a table row, or `:task ID`)."""

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id


class SortChanged(Message):
    """The task table's sort column or direction changed (`<` `>` `I`): the screen refills it
    in the new order (the whole selection, not one window)."""

    def __init__(self, column: str | None, descending: bool, task: str | None) -> None:
        super().__init__()
        self.column = column
        self.descending = descending
        self.task = task  # highlighted before: it stays highlighted in the new order
