"""What the tests read off the monitor: a widget's text, the whole screen's text."""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App
from textual.widget import Widget


def text_of(widget: Widget) -> str:
    """What a widget shows, as plain text (its renderable printed at its own width)."""
    console = Console(width=max(20, widget.content_size.width), file=io.StringIO(),
                      color_system=None, record=True)
    console.print(widget.render())
    return console.export_text()


def screen_text(app: App[object]) -> str:
    """The whole screen as the terminal shows it (every cell), one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
