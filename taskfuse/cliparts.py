"""What both halves of the `taskfuse` command (cli.py and opscli.py) share: the usage error,
the store a command opens, and the seconds argument.

A module of its own so that opscli.py need not import cli.py back (cli.py adds opscli's
commands to its parser): the two would otherwise form an import circle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from taskfuse.cliguard import number_arg
from taskfuse.core import bounds
from taskfuse.core.storeapi import Store
from taskfuse.store import open_store


class CliError(Exception):
    """A mistake of the person at the keyboard: printed as one line, exit status 2."""


#: A duration in seconds, more than 0 and at most the longest the core accepts.
positive_float = number_arg(float, 0.0, bounds.MAX_DURATION_S, open_low=True)


@contextmanager
def opened_store(url: str | None) -> Iterator[Store]:
    """Open the store a URL names (closing it after); a missing URL is a usage mistake."""
    if not url:
        raise CliError("no store given: pass --store URL or set TASKFUSE_STORE")
    store = open_store(url)
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
