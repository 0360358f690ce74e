"""ctx.pool(name): a FIFO section of the limits' size, failing with pool_timeout."""

from __future__ import annotations

import threading

from taskfuse.core.events import EventKind, EventList
from taskfuse.core.states import TaskStatus
from taskfuse.limits.files import parse_limits
from taskfuse.runtime import POOL_TIMEOUT, App, PoolSection, TaskError
from tests.observe.conftest import wait_for
from tests.runtime.conftest import JOIN_S
from tests.runtime.test_orchestration import Concurrency


def test_no_more_than_the_pool_size_hold_a_permit(make_runner) -> None:
    app = App.from_limits(parse_limits("pools: {batch: {size: 3, acquire_timeout_s: 30}}"))
    inside = Concurrency()

    @app.task("query")
    def query(ctx, payload):
        with ctx.pool("batch"), inside:
            ctx.sleep(0.005)
        return payload

    events = EventList()
    runner = make_runner(app, workers=12, sinks=[events])
    runner.submit_many([runner.spec("query", i) for i in range(48)])
    assert runner.join(JOIN_S)
    assert runner.counts()[TaskStatus.SUCCESS] == 48
    assert inside.peak == 3 and runner.pools["batch"].max_in_use == 3
    assert runner.pools["batch"].in_use == 0
    waits = [e for e in events.of_kind(EventKind.WAIT) if e.subject == "batch"]
    assert waits and {e.reason for e in waits} == {"pool"}
    assert app.pool_size("batch") == 3


def test_a_wait_beyond_the_acquire_timeout_fails_with_pool_timeout(make_runner) -> None:
    app = App()
    app.pool("db", size=1, acquire_timeout_s=0.05)
    holding, release = threading.Event(), threading.Event()

    @app.task("hold", max_retry=0)
    def hold(ctx, payload):
        with ctx.pool("db"):
            holding.set()
            release.wait(JOIN_S)

    @app.task("wait", max_retry=0)
    def wait(ctx, payload):
        with ctx.pool("db"):
            return "never"

    runner = make_runner(app, workers=2)
    runner.submit("hold")
    assert holding.wait(JOIN_S)
    waiter = runner.submit("wait")
    wait_for(lambda: runner.get(waiter.task_id).status is TaskStatus.FAILED, "pool_timeout")
    release.set()
    assert runner.join(JOIN_S)
    final = runner.get(waiter.task_id)
    assert final.error_kind == POOL_TIMEOUT and "'db'" in final.error_msg
    assert runner.pools["db"].timeouts == 1


def test_a_cancel_wakes_a_task_waiting_for_its_turn(make_runner) -> None:
    app = App()
    app.pool("db", size=1, acquire_timeout_s=60)
    holding, release = threading.Event(), threading.Event()

    @app.task("hold")
    def hold(ctx, payload):
        with ctx.pool("db"):
            holding.set()
            release.wait(JOIN_S)

    @app.task("wait")
    def wait(ctx, payload):
        with ctx.pool("db"):
            return "never"

    runner = make_runner(app, workers=2)
    runner.submit("hold")
    assert holding.wait(JOIN_S)
    waiter = runner.submit("wait")
    wait_for(lambda: runner.pools["db"].waiting == 1, "the task queued for the pool")
    runner.cancel(waiter.task_id)
    release.set()
    assert runner.join(JOIN_S)
    assert runner.get(waiter.task_id).status is TaskStatus.CANCELED
    section = runner.pools["db"]  # the canceled attempt unwinds on its own thread:
    wait_for(lambda: section.in_use == 0, "every permit given back")
    assert section.waiting == 0 and section.timeouts == 0


def test_code_outside_tasks_takes_the_same_fifo_turn() -> None:
    section = PoolSection("shared", 1, acquire_timeout_s=0.01)
    with section.permit():
        assert section.in_use == 1
        try:
            section.permit().acquire()
        except TaskError as exc:
            assert exc.kind == POOL_TIMEOUT
        else:
            raise AssertionError("a second permit of a pool of 1 was granted")
    assert section.in_use == 0 and section.timeouts == 1
    section.close()
    assert not section.acquire()  # closed: no permit, at once
    assert section.timeouts == 1


def test_an_unknown_pool_is_a_configuration_error(make_runner) -> None:
    app = App()

    @app.task("q", max_retry=0)
    def q(ctx, payload):
        with ctx.pool("nowhere"):
            return None

    runner = make_runner(app)
    task = runner.submit("q")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.error_kind == "bad_config" and "'nowhere'" in final.error_msg
