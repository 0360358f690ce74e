"""What every monitor screen shares: the time bar on top; the prompt, the active search and
the key footer below.

The app gives each screen the model once (data down) and then only sets `t` and `info`;
a screen turns those into its widgets' attributes in `show()`, so widgets stay renderers.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer

from tui.trace_model import PlayInfo, TraceModel
from tui.widgets.commandbar import CommandBar, FilterLine
from tui.widgets.timebar import TimeBar


class MonitorScreen(Screen[None]):
    """A screen that follows the app's time cursor."""

    DEFAULT_CSS = """
    #bottom { dock: bottom; height: auto; }
    #bottom > Footer { dock: none; }
    """

    t: reactive[float] = reactive(0.0, init=False)
    #: The time bar repaints itself; a repaint of the whole screen for every read of a
    #: followed run (the default) was most of an idle follow's cost.
    info: reactive[PlayInfo | None] = reactive(None, init=False, repaint=False)

    def __init__(self, model: TraceModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model

    def compose(self) -> ComposeResult:
        yield TimeBar()
        yield from self.compose_body()
        with Vertical(id="bottom"):  # docked together: docks on one edge would overlap
            yield CommandBar()
            yield FilterLine()
            yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.query_one(TimeBar).info = self.info
        self.show()

    def watch_t(self) -> None:
        if self.is_mounted:
            self.show()

    def watch_info(self, info: PlayInfo | None) -> None:
        if self.is_mounted:
            self.query_one(TimeBar).info = info

    def show(self) -> None:
        """Push what this screen shows at `t` down into its widgets."""

    def open_prompt(self, mode: str, text: str = "") -> None:
        self.query_one(CommandBar).open(mode, text)
