"""The runner on SQLite: no outside lock around the store, wake-ups from the store, two
runners (as two processes would) sharing one file."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import taskfuse.store.sqlite as sqlite
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, TaskError
from tests.runtime.conftest import JOIN_S


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runtime.db'}?synchronous=NORMAL"


def _open(url: str):
    return sqlite.SQLiteStore.from_url(url)


def test_two_runners_on_one_file_run_each_task_exactly_once(make_runner, db_url) -> None:
    app = App()
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    @app.task("once")
    def once(ctx, payload):
        with lock:
            seen[ctx.task_id] += 1
        time.sleep(0.005)  # long enough for the second runner to hear of the work

    first = make_runner(app, store=_open(db_url), workers=2, worker_id="a")
    second = make_runner(app, store=_open(db_url), workers=2, worker_id="b")
    tasks = first.submit_many([first.spec("once", i) for i in range(200)])
    assert first.join(JOIN_S) and second.join(JOIN_S)
    assert set(seen) == {t.task_id for t in tasks} and set(seen.values()) == {1}
    assert first.counts()[TaskStatus.SUCCESS] == 200
    assert first.stats.completed > 0 and second.stats.completed > 0  # both took a share


def test_submit_from_elsewhere_wakes_an_idle_runner(make_runner, db_url) -> None:
    app = App()

    @app.task("echo")
    def echo(ctx, payload):
        return payload

    # Idle waits bounded at 30 s: only the store's wait_for_work can wake the workers.
    runner = make_runner(app, store=_open(db_url), workers=2, poll_s=30.0)
    other = app.scheduler(_open(db_url))  # another process's submit, as `taskfuse submit`
    time.sleep(0.2)  # let the runner settle into its idle waits
    task = other.submit(app.spec("echo", "hi"), time.time())
    end = time.monotonic() + JOIN_S
    while runner.get(task.task_id).status is not TaskStatus.SUCCESS:
        assert time.monotonic() < end
        time.sleep(0.02)
    assert runner.get(task.task_id).result == "hi"


def test_cancel_timeout_cap_and_retries_on_sqlite(make_runner, db_url) -> None:
    app = App()
    started = threading.Event()
    inside, peak, lock = [0], [0], threading.Lock()

    @app.task("loop")
    def loop(ctx, payload):
        started.set()
        while not ctx.cancelled():
            time.sleep(0.01)
        return "late"

    @app.task("stuck", timeout=0.1, max_retry=0)
    def stuck(ctx, payload):
        ctx.sleep(5)

    @app.task("capped")
    def capped(ctx, payload):
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1
        if ctx.attempt == 1 and payload == 0:
            raise TaskError("http_503", "try again")

    runner = make_runner(app, store=_open(db_url), workers=5)
    looping = runner.submit("loop")
    assert started.wait(JOIN_S)
    stuck_task = runner.submit("stuck")
    batch = runner.submit_batch([runner.spec("capped", i) for i in range(6)], "b", cap=2)
    operator = App().scheduler(_open(db_url))
    operator.cancel(looping.task_id, time.time())
    assert runner.join(JOIN_S)
    runner.shutdown(grace_s=JOIN_S)
    assert runner.get(looping.task_id).status is TaskStatus.CANCELED
    assert runner.get(stuck_task.task_id).status is TaskStatus.TIMEOUT
    assert peak[0] == 2
    finals = [runner.get(t.task_id) for t in batch]
    assert {t.status for t in finals} == {TaskStatus.SUCCESS}
    assert sorted(t.retry_count for t in finals) == [0, 0, 0, 0, 0, 1]
    assert runner.stats.discarded == 2  # the canceled loop's and the timed-out nap's results


def test_a_result_the_store_cannot_keep_fails_the_task(make_runner, db_url) -> None:
    app = App()

    @app.task("odd")
    def odd(ctx, payload):
        return object()  # not JSON: the store refuses it

    runner = make_runner(app, store=_open(db_url))
    task = runner.submit("odd")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.error_kind == "result_error"
    assert final.retry_count == 0
