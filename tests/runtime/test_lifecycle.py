"""Real threads through the core: cancel, watchdog timeouts, retries, unknown kinds."""

from __future__ import annotations

import threading
import time

from taskfuse.core.retry import Backoff, BackoffKind, RetryPolicy
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from taskfuse.runtime import App, TaskError
from tests.runtime.conftest import JOIN_S

FAST_RETRY = RetryPolicy(max_retry=3, backoff=Backoff(BackoffKind.EXPONENTIAL, base=0.01, cap=0.05))


def test_cancel_running_task_is_seen_by_ctx_and_its_late_result_discarded(make_runner) -> None:
    app = App()
    started, saw_cancel = threading.Event(), threading.Event()

    @app.task("loop")
    def loop(ctx, payload):
        started.set()
        while not ctx.cancelled():
            time.sleep(0.005)
        saw_cancel.set()
        return "late"

    runner = make_runner(app)
    task = runner.submit("loop")
    assert started.wait(JOIN_S)
    runner.cancel(task.task_id)
    assert saw_cancel.wait(JOIN_S)
    runner.shutdown(grace_s=JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.CANCELED
    assert final.result is None and final.error_kind == "canceled"
    assert runner.stats.discarded == 1


def test_cancel_from_elsewhere_is_read_from_the_store(make_runner) -> None:
    """Another process cancels through the store: the runner never hears of it directly."""
    app = App()
    started = threading.Event()

    @app.task("loop")
    def loop(ctx, payload):
        started.set()
        while not ctx.cancelled():
            time.sleep(0.005)
        return "late"

    runner = make_runner(app)
    task = runner.submit("loop")
    assert started.wait(JOIN_S)
    operator = App().scheduler(runner.store)  # a second scheduler, as the CLI would build
    with runner.lock:  # MemoryStore is not thread-safe: share the runner's lock
        operator.cancel(task.task_id, time.time(), "operator")
    runner.shutdown(grace_s=JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.CANCELED
    assert runner.stats.discarded == 1


def test_cancel_pending_task_never_runs(make_runner) -> None:
    app = App()
    ran = []

    @app.task("k")
    def k(ctx, payload):
        ran.append(ctx.task_id)

    runner = make_runner(app, start=False)
    task = runner.submit("k")
    runner.cancel(task.task_id)
    runner.start()
    assert runner.join(JOIN_S)
    assert ran == [] and runner.get(task.task_id).status is TaskStatus.CANCELED


def test_watchdog_times_out_and_the_late_completion_loses(make_runner) -> None:
    app = App()

    @app.task("stuck", timeout=0.1, max_retry=0)
    def stuck(ctx, payload):
        time.sleep(0.4)  # ignores its context on purpose: the watchdog must not rely on it
        return "too late"

    runner = make_runner(app)
    task = runner.submit("stuck")
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.TIMEOUT
    runner.shutdown(grace_s=JOIN_S)  # lets the stuck attempt return
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.TIMEOUT and final.result is None
    assert final.error_kind == "timeout"
    assert runner.stats.discarded == 1 and runner.stats.expired == 1


def test_timed_out_task_is_retried_when_the_policy_allows(make_runner) -> None:
    app = App(policy=FAST_RETRY)
    attempts = []

    @app.task("slow_once", timeout=0.1, max_retry=1)
    def slow_once(ctx, payload):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            ctx.sleep(5)  # woken by the watchdog's stop signal
        return "ok"

    runner = make_runner(app)
    task = runner.submit("slow_once")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == "ok"
    assert final.retry_count == 1 and attempts == [1, 2]


def test_retryable_errors_back_off_then_succeed(make_runner) -> None:
    app = App(policy=FAST_RETRY)
    attempts = []

    @app.task("flaky")
    def flaky(ctx, payload):
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise TaskError("http_503", "unavailable")
        return {"attempt": ctx.attempt}

    runner = make_runner(app)
    task = runner.submit("flaky")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == {"attempt": 3}
    assert final.retry_count == 2 and attempts == [1, 2, 3]


def test_fatal_error_fails_at_once_and_unknown_errors_exhaust_retries(make_runner) -> None:
    app = App(policy=FAST_RETRY)

    @app.task("bad")
    def bad(ctx, payload):
        raise TaskError("bad_params", "sku missing")

    @app.task("broken", max_retry=2)
    def broken(ctx, payload):
        raise KeyError("sku")

    runner = make_runner(app)
    bad_task, broken_task = runner.submit("bad"), runner.submit("broken")
    assert runner.join(JOIN_S)
    bad_final, broken_final = runner.get(bad_task.task_id), runner.get(broken_task.task_id)
    assert (bad_final.status, bad_final.retry_count) == (TaskStatus.FAILED, 0)
    assert bad_final.error_kind == "bad_params" and bad_final.error_msg == "sku missing"
    assert (broken_final.status, broken_final.retry_count) == (TaskStatus.FAILED, 2)
    assert broken_final.error_kind == "KeyError"


def test_task_of_an_unregistered_kind_fails_without_retries(make_runner) -> None:
    app = App(policy=FAST_RETRY)
    runner = make_runner(app)
    with runner.lock:  # submitted by someone whose app knows the kind; this worker does not
        task = runner.scheduler.submit(TaskSpec("mystery"), time.time())
    with runner.lock:
        runner.work_changed()  # what the store's notification would do
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.error_kind == "unknown_kind"
    assert final.retry_count == 0


def test_wait_settled_returns_once_every_worker_thread_waits_for_work(make_runner) -> None:
    """A load test's time zero: `start` returns once 1,000 threads exist, and they reach
    their wait a moment later; once settled, a submitted task starts at once."""
    runner = make_runner(App("settle"), workers=1000)
    assert runner.wait_settled(JOIN_S)
    at = runner.attempts
    with at.mu:
        assert at.waiting == at.live_threads == 1000
