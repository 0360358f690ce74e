"""Columns of plain text for a command's output, laid out by rich.

Why one helper: `taskfuse status`, `lab size` and `lab sweep` print tables that people read
and scripts split on whitespace, and each used to pad its own by hand. Here rich lays them
out (no box, two spaces between columns, no colour, no trailing spaces), as wide as the cells
need: rich takes a pipe for 80 columns and would fold or cut a cell a script needs whole.

Names come from users (a kind, a batch id, a task id): `shown` is the one way they reach a
table or a log line. Control characters are written as Python escapes, so a batch id with a
newline cannot forge a row of `taskfuse status` or a kind a line of a worker's log, and an
escape sequence cannot reach the terminal; a cell is text, never rich markup.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Literal

Justify = Literal["left", "right"]
#: C0 and C1 controls, DEL, line and paragraph separators, and the bidirectional overrides
#: (which reorder what follows them on screen).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                      "\u2066-\u2069]")


def shown(text: str) -> str:
    """`text` with its control characters escaped (`\\n`, `\\x1b`, `\\u202e`): one line, inert."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def columns(head: Sequence[str], body: Sequence[Sequence[str]],
            justify: Justify | Sequence[Justify] = "left") -> list[str]:
    """The table's lines: `head`, then each row of `body`; `justify` for every column or one
    per column."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    ways = [justify] * len(head) if isinstance(justify, str) else list(justify)
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="")
    for name, way in zip(head, ways, strict=True):
        table.add_column(name, justify=way, no_wrap=True)
    cells = [[shown(cell) for cell in row] for row in body]
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    width = sum(max(len(c) for c in col) + 2 for col in zip(head, *cells, strict=True))
    out = io.StringIO()
    Console(file=out, width=max(width, 1), color_system=None, force_terminal=False,
            highlight=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]
