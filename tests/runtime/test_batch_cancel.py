"""A canceled batch stops at once in a worker that holds attempts of it (issue 27).

A worker claims ahead (claim_batch > 1, the prefetch): those attempts are RUNNING in the
store and wait in its buffer. When their batch is canceled, they must be let go unrun and
the running ones told to stop at once, whoever canceled: this runner (in-process), or
another process through the store (the CLI; here a second store object on the same file
or schema, so the only news is the store's wake-up). The heartbeat is set far beyond the
test's bounds, so it cannot be what brings the news.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from taskfuse.core.states import TaskStatus
from taskfuse.limits.schema import Limits
from taskfuse.runtime import App, Runner
from taskfuse.store.memory import MemoryStore
from tests.runtime.conftest import JOIN_S
from tests.runtime.test_prefetch import opener, wait_until

__all__ = ["opener"]  # the fixture (SQLite file or PostgreSQL schema), used by name

#: Far beyond every wait of this test: a stop seen within NEWS_S came from elsewhere.
HEARTBEAT_S = 120.0
NEWS_S = 10.0
AHEAD = 3  # claim_batch 4 on one thread: the task it runs and three claimed ahead


def _app() -> tuple[App, Counter[str], threading.Event, threading.Event]:
    app = App(lease_s=3 * HEARTBEAT_S)
    app.configure(Limits(claim_batch=AHEAD + 1))
    ran: Counter[str] = Counter()
    began, saw_stop = threading.Event(), threading.Event()

    @app.task("hold")
    def hold(ctx: Any, payload: Any) -> None:
        ran[ctx.task_id] += 1
        began.set()
        if ctx.wait_stop(JOIN_S):  # the worker's signal only: it never asks the store
            saw_stop.set()

    return app, ran, began, saw_stop


def _buffered(runner: Runner) -> int:
    with runner.attempts.mu:
        return len(runner.attempts.buffer)


def _hold_a_batch(runner: Runner, began: threading.Event) -> list[Any]:
    tasks = runner.submit_batch([runner.spec("hold", i) for i in range(AHEAD + 3)], "b1")
    assert began.wait(JOIN_S)
    assert wait_until(lambda: _buffered(runner) == AHEAD)
    return tasks


def _ends_canceled_unrun(runner: Runner, tasks: list[Any], ran: Counter[str],
                         saw_stop: threading.Event) -> None:
    assert saw_stop.wait(NEWS_S), "the running attempt was not told to stop"
    assert wait_until(lambda: _buffered(runner) == 0, NEWS_S), "claimed-ahead tasks kept"
    assert runner.join(JOIN_S)
    assert sum(ran.values()) == 1  # only the task that was running when the cancel came
    assert {runner.get(t.task_id).status for t in tasks} == {TaskStatus.CANCELED}


def test_a_batch_canceled_by_another_process_is_let_go_at_once(opener, make_runner) -> None:
    app, ran, began, saw_stop = _app()
    runner = make_runner(app, store=opener(), workers=1, heartbeat_s=HEARTBEAT_S)
    tasks = _hold_a_batch(runner, began)
    other = opener()  # another connection: as the CLI's cancel from another process
    try:
        assert app.scheduler(other, now=time.time()).cancel_batch("b1", time.time()) \
            == len(tasks)
        _ends_canceled_unrun(runner, tasks, ran, saw_stop)
    finally:
        other.close()


def test_a_batch_canceled_in_process_leaves_the_buffer_at_once(make_runner) -> None:
    app, ran, began, saw_stop = _app()
    runner = make_runner(app, store=MemoryStore(), workers=1, heartbeat_s=HEARTBEAT_S)
    tasks = _hold_a_batch(runner, began)
    runner.cancel_batch("b1")
    assert _buffered(runner) == 0  # when the cancel returns, not when a thread gets there
    _ends_canceled_unrun(runner, tasks, ran, saw_stop)
    assert runner.stats.discarded >= AHEAD
