"""Graceful shutdown in-process: finish what fits in the grace period, release the rest."""

from __future__ import annotations

import threading
import time

from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App
from tests.runtime.conftest import JOIN_S


def test_shutdown_finishes_short_tasks_and_releases_long_ones(make_runner) -> None:
    app = App()
    started, stopped = threading.Semaphore(0), threading.Semaphore(0)
    stopped_early: list[str] = []

    @app.task("short")
    def short(ctx, payload):
        started.release()
        time.sleep(0.05)
        return "done"

    @app.task("long")
    def long(ctx, payload):
        started.release()
        if ctx.sleep(30):
            stopped_early.append(ctx.task_id)
        stopped.release()
        return "late"

    runner = make_runner(app, workers=4)
    shorts = [runner.submit("short") for _ in range(2)]
    longs = [runner.submit("long") for _ in range(2)]
    for _ in range(4):
        assert started.acquire(timeout=JOIN_S)
    released = runner.shutdown(grace_s=0.5)
    assert sorted(t.task_id for t in released) == sorted(t.task_id for t in longs)
    for task in shorts:
        assert runner.get(task.task_id).status is TaskStatus.SUCCESS
    for task in longs:
        final = runner.get(task.task_id)
        assert final.status is TaskStatus.PENDING
        assert final.retry_count == 0 and final.worker_id is None  # a release is no attempt
    for _ in range(2):  # released attempts are told to stop, and do
        assert stopped.acquire(timeout=JOIN_S)
    assert sorted(stopped_early) == sorted(t.task_id for t in longs)
    assert runner.stats.released == 2


def test_released_tasks_run_again_on_the_next_runner(make_runner) -> None:
    app = App()
    first_run = threading.Event()

    @app.task("job")
    def job(ctx, payload):
        if not first_run.is_set():
            first_run.set()
            ctx.sleep(30)
            return "first"
        return "second"

    old = make_runner(app, workers=1)
    task = old.submit("job")
    assert first_run.wait(JOIN_S)
    old.shutdown(grace_s=0.05)
    assert old.get(task.task_id).status is TaskStatus.PENDING
    new = make_runner(app, store=old.store, workers=1)
    assert new.join(JOIN_S)
    final = new.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == "second"
    assert final.retry_count == 0


def test_a_stopping_runner_claims_nothing_new(make_runner) -> None:
    app = App()
    ran: list[str] = []

    @app.task("job")
    def job(ctx, payload):
        ran.append(ctx.task_id)

    runner = make_runner(app)
    runner.request_stop()
    task = runner.submit("job")
    runner.shutdown(grace_s=1.0)
    assert ran == [] and runner.get(task.task_id).status is TaskStatus.PENDING
