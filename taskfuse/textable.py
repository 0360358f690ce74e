"""Columns of plain text for a command's output, laid out by rich.

Why one helper: `taskfuse status`, `lab size` and `lab sweep` print tables that people read
and scripts split on whitespace, and each used to pad its own by hand. Here rich lays them
out (no box, two spaces between columns, no colour, no trailing spaces), as wide as the cells
need: rich takes a pipe for 80 columns and would fold or cut a cell a script needs whole.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Literal

Justify = Literal["left", "right"]


def columns(head: Sequence[str], body: Sequence[Sequence[str]],
            justify: Justify | Sequence[Justify] = "left") -> list[str]:
    """The table's lines: `head`, then each row of `body`; `justify` for every column or one
    per column."""
    from rich.console import Console
    from rich.table import Table

    ways = [justify] * len(head) if isinstance(justify, str) else list(justify)
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="")
    for name, way in zip(head, ways, strict=True):
        table.add_column(name, justify=way, no_wrap=True)
    for row in body:
        table.add_row(*row)
    width = sum(max(len(c) for c in col) + 2 for col in zip(head, *body, strict=True))
    out = io.StringIO()
    Console(file=out, width=max(width, 1), color_system=None, force_terminal=False,
            highlight=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]
