"""Runners that always shut down, so a failing test never leaves worker threads behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from taskfuse.runtime import App, Runner
from taskfuse.store.memory import MemoryStore

#: Generous bound for joins: tests assert states, and only fail on this if something hangs.
JOIN_S = 20.0


@pytest.fixture
def make_runner() -> Iterator[Callable[..., Runner]]:
    made: list[Runner] = []

    def make(app: App, store: Any = None, start: bool = True, **kw: Any) -> Runner:
        kw.setdefault("workers", 4)
        runner = Runner(app, store if store is not None else MemoryStore(), **kw)
        made.append(runner)
        return runner.start() if start else runner

    yield make
    for runner in made:
        runner.shutdown(grace_s=2.0)
    for runner in made:
        close = getattr(runner.store, "close", None)
        if close is not None:
            close()
