"""How the async executor's claims are sized and woken: the hot path's round trips.

A worker whose kinds all run on the event loop claims up to MAX_LOOP_GROUP at once, and a
coroutine that ends once the store is drained costs no claim of its own (only the commit's
look for retries and released dependents). Counted by wrapping the scheduler's real claim;
waits are on readiness signals (a coroutine began, the claimer went idle).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from taskfuse.core.states import TaskStatus
from taskfuse.limits.schema import Limits
from taskfuse.runtime import App, Runner
from taskfuse.runtime.attempts import MAX_GROUP, MAX_LOOP_GROUP
from tests.runtime.conftest import JOIN_S


def _until(check: Any, what: str) -> None:
    end = time.monotonic() + JOIN_S
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.002)


class Claims:
    """The sizes asked and the answers of every claim the runner makes from now on."""

    def __init__(self, runner: Runner) -> None:
        self.asked: list[int] = []
        scheduler = runner.shared.scheduler
        real = scheduler.claim

        def claim(worker_id: str, now: float, n: int = 1, *args: Any, **kw: Any) -> Any:
            self.asked.append(n)
            return real(worker_id, now, n, *args, **kw)

        scheduler.claim = claim  # type: ignore[method-assign]


def _gated_app(concurrency: int) -> tuple[App, threading.Event, threading.Event]:
    """An async kind that waits for `gate`; `began` is set once a coroutine runs."""
    app = App.from_limits(Limits.model_validate({"async_concurrency": concurrency}), "claims")
    gate, began = threading.Event(), threading.Event()

    @app.task("hold")
    async def hold(ctx: Any, payload: Any) -> None:
        began.set()
        while not gate.is_set():
            await asyncio.sleep(0.002)

    return app, gate, began


def test_a_loop_only_worker_claims_past_a_thread_claims_group(make_runner) -> None:
    n = MAX_GROUP * 2 + 10
    app, gate, _ = _gated_app(concurrency=n)
    runner = make_runner(app, start=False)
    claims = Claims(runner)
    runner.submit_many([app.spec("hold")] * n)  # all there before the first claim
    runner.start()
    _until(lambda: runner.stats.claimed == n, "every task claimed")
    gate.set()
    assert runner.join(JOIN_S)
    assert claims.asked[0] == min(n, MAX_LOOP_GROUP) > MAX_GROUP
    assert runner.stats.completed == n


def test_an_end_after_the_store_drained_costs_no_claim_and_new_work_still_runs(
        make_runner) -> None:
    app, gate, began = _gated_app(concurrency=100)
    runner = make_runner(app)
    first = runner.submit("hold")
    assert began.wait(JOIN_S)
    _until(lambda: runner.claimer.idle and runner.shared.drained, "the claimer drained")
    claims = Claims(runner)
    gate.set()
    assert runner.join(JOIN_S)
    # The commit's look only: the coroutine's end found the claimer drained.
    _until(lambda: len(claims.asked) >= 1 and runner.claimer.idle, "the commit's look")
    assert len(claims.asked) == 1
    second = runner.submit("hold")  # a submit wakes a drained claimer
    assert runner.join(JOIN_S)
    assert runner.get(first.task_id).status is TaskStatus.SUCCESS
    assert runner.get(second.task_id).status is TaskStatus.SUCCESS


def test_a_wave_that_ends_in_one_turn_is_committed_in_one_group(make_runner) -> None:
    """Thousands of coroutines that waited alike end in one turn of the loop; a loop-only
    worker commits them in one group up to its claim's size (three groups of MAX_GROUP
    before: three write transactions between a wave's end and the claim that refills it)."""
    n = MAX_GROUP * 2 + 10
    app = App.from_limits(Limits.model_validate({"async_concurrency": n}), "wave")
    wave = asyncio.Event()  # bound to the runner's loop at its first wait
    began: list[int] = []

    @app.task("hold")
    async def hold(ctx: Any, payload: Any) -> None:
        began.append(1)
        await wave.wait()

    runner = make_runner(app)
    runner.submit_many([app.spec("hold")] * n)
    _until(lambda: len(began) == n, "every coroutine waiting")
    groups = runner.stats.groups
    loop = runner.loop
    assert loop is not None
    loop.aio.loop.call_soon_threadsafe(wave.set)  # every waiter resumes in the same turn
    assert runner.join(JOIN_S)
    assert runner.stats.completed == n
    assert runner.stats.groups - groups == 1
