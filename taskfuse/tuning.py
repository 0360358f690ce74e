"""Process-level tuning shared by the drivers (not the core: the core never touches the
interpreter's machinery).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collect_rarely(threshold: int = 50_000) -> Iterator[None]:
    """Run the cyclic garbage collector less often inside the block.

    A scheduler keeps every task record alive, so each full collection rescans all of them
    while almost nothing cyclic is ever freed: with 100,000 tasks held, collections add about
    a third to the cost of a claim+complete cycle. Raising the first threshold makes full
    passes rare; the previous thresholds are restored on exit.
    """
    before = gc.get_threshold()
    gc.set_threshold(threshold, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)
