"""What the tests read off the monitor: a widget's text, the whole screen's text."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot
from textual.widget import Widget

from tui.app import MonitorApp


def text_of(widget: Widget) -> str:
    """What a widget shows, as plain text (its renderable printed at its own width)."""
    console = Console(width=max(20, widget.content_size.width), file=io.StringIO(),
                      color_system=None, record=True)
    console.print(widget.render())
    return console.export_text()


def screen_text(app: App[object]) -> str:
    """The whole screen as the terminal shows it (every cell), one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def rendered_lines(renderable: object, width: int) -> list[str]:
    """A Rich renderable's lines at `width` (trailing blank lines dropped)."""
    console = Console(width=max(1, width), file=io.StringIO(), color_system=None)
    lines = console.render_lines(renderable, console.options.update(width=max(1, width)),  # type: ignore[arg-type]
                                 pad=False)
    text = ["".join(seg.text for seg in line).rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    return text


def cut_panels(app: App[object]) -> list[str]:
    """Every panel of the screen whose text does not fit where it is shown: a line longer
    than its width (the terminal would wrap or crop it), more lines than its height, or a
    panel that reaches past the screen or under another. Empty when nothing is cut."""
    from tui.widgets.styling import Panel

    problems = []
    screen = app.screen
    for panel in screen.query(Panel):
        if not panel.display or not panel.region.area:
            continue
        w, h = panel.content_size
        narrow = rendered_lines(panel.render(), w)
        wide = rendered_lines(panel.render(), w + 500)
        name = f"{type(panel).__name__}({w}x{h})"
        if len(narrow) != len(wide):
            over = [ln for ln in wide if len(ln) > w]
            problems.append(f"{name}: lines wider than {w}: {over[:2]!r}")
        if len(narrow) > h:
            problems.append(f"{name}: {len(narrow)} lines in {h}: last {narrow[-1]!r}")
        if panel.region.bottom > screen.size.height or panel.region.right > screen.size.width:
            problems.append(f"{name}: reaches past the screen at {panel.region}")
    content = getattr(screen, "content", None)  # the help box: a Static, not a Panel
    if content is not None:
        box = screen.query_one("#help")
        w, h = box.content_size
        lines = rendered_lines(content, w)
        if len(lines) > h or box.region.bottom > screen.size.height:
            problems.append(f"help: {len(lines)} lines in {h}: last {lines[-1]!r}")
    return problems


def footer_cut(app: App[object]) -> list[str]:
    """Key hints the footer should show but does not (cut at the screen's edge)."""
    from textual.widgets import Footer

    if not app.screen.query(Footer):  # a modal over another screen's footer
        return []
    last = screen_text(app).splitlines()[-1]
    missing = []
    for active in app.screen.active_bindings.values():
        binding = active.binding
        if binding.show and active.enabled:
            hint = f"{app.get_key_display(binding)} {binding.description}"
            if hint not in last:
                missing.append(hint)
    return missing


#: What a test does to an app before the screen is read.
Steps = Callable[[Pilot[int]], Awaitable[None]]


def at(t: float, *keys: str) -> Steps:
    """Seek the monitor to `t`, press `keys`, let it settle."""
    async def steps(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, MonitorApp)
        app.seek(t)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return steps
