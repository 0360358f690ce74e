"""A panel's height follows its content even when a sibling's layout runs between two of
its changes (the room test's "DownstreamPanel(62x1) holding 3 lines" on a loaded machine).

Textual keys a widget's measured box by a layout generation that it advances only when no
layout of the widget is pending. The order that broke it is forced here, not waited for: the
panel changes, a sibling's idle turn comes first and the screen lays out (measuring the
panel's first change), then the panel changes again before its own idle turn.
"""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from tui.trace_model import DownstreamRow
from tui.widgets.downstreams import DownstreamPanel


def _rows(n: int) -> tuple[DownstreamRow, ...]:
    return tuple(DownstreamRow(f"partner-{k}", "closed", None, 1, 8, 2.0, 0, None, None)
                 for k in range(n))


class _Two(App[int]):
    def compose(self) -> ComposeResult:
        yield DownstreamPanel(id="mine")
        yield DownstreamPanel(id="sibling")


def test_a_panel_grows_when_a_sibling_lays_out_between_its_changes() -> None:
    heights: list[int] = []

    async def main() -> None:
        app = _Two()
        async with app.run_test(size=(60, 30)) as pilot:
            mine = app.query_one("#mine", DownstreamPanel)
            sibling = app.query_one("#sibling", DownstreamPanel)
            await pilot.pause()
            mine.rows = _rows(2)  # a layout of `mine` is now pending
            sibling.rows = _rows(1)
            sibling._check_refresh()  # the sibling's idle turn comes first,
            app.screen._refresh_layout()  # and the screen lays out with two rows
            heights.append(mine.content_size.height)
            mine.rows = _rows(3)  # before mine's own idle turn
            for _ in range(100):
                await pilot.pause(0.01)
                if mine.content_size.height == 3:
                    break
            heights.append(mine.content_size.height)

    asyncio.run(main())
    assert heights == [2, 3]
