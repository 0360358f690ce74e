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


@contextmanager
def worker_heap(threshold: int = 50_000) -> Iterator[None]:
    """A worker process's heap, once its runner is built: what is alive then (modules, the
    app, the runner's roles) is moved out of the collector's sight (`gc.freeze`), and
    collections run rarely (`collect_rarely`'s threshold). Enter it before the runner
    starts, so every attempt runs inside it.

    A worker with thousands of attempts in flight holds a context, a record and a coroutine
    or a thread for each: full collections rescanned all of it 7 to 11 times in a round of
    30,000 calls at 10,000 in flight, up to 0.73 s each with every thread paused (1.8 to
    4.1 s a round); frozen and rarer, the calls ran 23 % faster (three alternating pairs).
    Undone on exit (unfrozen, thresholds restored).
    """
    gc.collect()
    gc.freeze()
    try:
        with collect_rarely(threshold):
            yield
    finally:
        gc.unfreeze()
