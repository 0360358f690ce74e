"""Shared words and colours, so a breaker or a state looks the same in every panel.

Colours come from component classes styled in the app's .tcss with theme variables
($success, $warning, $error), so the light and the dark theme both stay readable.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

BREAKER_LABELS = {"closed": "CLOSED", "half_open": "HALF-OPEN", "open": "OPEN"}
#: Component classes every panel declares so the .tcss can colour them.
COMPONENTS = {
    "tf--good", "tf--warn", "tf--bad", "tf--dim", "tf--accent",
}
STATE_TONE = {
    "PENDING": "tf--accent", "RUNNING": "tf--warn", "SUCCESS": "tf--good",
    "FAILED": "tf--bad", "TIMEOUT": "tf--bad", "CANCELED": "tf--dim",
}
BREAKER_TONE = {"closed": "tf--good", "half_open": "tf--warn", "open": "tf--bad"}


def tone(widget: Widget, name: str) -> Style:
    """The rich style of a component class on `widget` (themed by the .tcss)."""
    return widget.get_component_rich_style(name, partial=True)


def breaker_text(widget: Widget, state: str | None, reopen_in: float | None = None) -> Text:
    """CLOSED / OPEN 12s / HALF-OPEN in the breaker's colour; "–" without a breaker."""
    if state is None:
        return Text("–", tone(widget, "tf--dim"))
    label = BREAKER_LABELS.get(state, state.upper())
    text = Text(label, tone(widget, BREAKER_TONE.get(state, "tf--dim")) + Style(bold=True))
    if state == "open" and reopen_in is not None:
        text.append(f" {reopen_in:.0f}s", tone(widget, "tf--dim"))
    return text


class Panel(Widget):
    """A bordered panel with the shared component classes."""

    COMPONENT_CLASSES = COMPONENTS
    DEFAULT_CSS = """
    Panel { height: auto; }
    """
