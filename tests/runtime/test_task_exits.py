"""A task raising a BaseException (argparse's sys.exit, a stray KeyboardInterrupt, a
GeneratorExit) cannot take its worker thread with it: the task fails for good under the
exception's name, the failure is logged, and the worker keeps every thread."""

from __future__ import annotations

import logging

import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.limits.files import parse_limits
from taskfuse.runtime import App
from tests.runtime.conftest import JOIN_S

_EXITS: dict[str, BaseException] = {
    "SystemExit": SystemExit(2),
    "KeyboardInterrupt": KeyboardInterrupt(),
    "GeneratorExit": GeneratorExit(),
}


def _exiting_app() -> App:
    """`exit` raises the BaseException its payload names; `quick` returns at once. Retries
    are allowed, so a FAILED end is the runtime's verdict, not the limits'."""
    app = App.from_limits(parse_limits("retry: {max_retry: 3, backoff: {kind: none}}\n"))

    @app.task("exit", timeout=1)
    def exit_(ctx, payload):
        raise _EXITS[payload]

    @app.task("quick", timeout=10)
    def quick(ctx, payload):
        return "ok"

    return app


def test_base_exceptions_fail_the_task_and_the_worker_keeps_its_threads(
        make_runner, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="taskfuse")
    runner = make_runner(_exiting_app(), workers=2, stuck_threads_max=1, watchdog_s=0.05)
    exits = [runner.submit("exit", name) for name in _EXITS for _ in range(2)]  # 6 > 2 threads
    assert runner.join(JOIN_S)
    for task in exits:
        done = runner.get(task.task_id)
        assert (done.status, done.error_kind) == (TaskStatus.FAILED, task.payload)
        assert done.retry_count == 0  # not retried: the next attempt would do the same
        assert task.payload in done.error_msg
    quick = [runner.submit("quick") for _ in range(3)]
    assert runner.join(JOIN_S)
    assert all(runner.get(t.task_id).status is TaskStatus.SUCCESS for t in quick)
    assert runner.attempts.live_threads == 2
    assert sum(t.is_alive() for t in runner.threads.threads) == 2
    assert not runner.stuck_threads()
    logged = [r for r in caplog.records if "would have ended the thread" in r.getMessage()]
    assert sorted(r.task_id for r in logged) == sorted(t.task_id for t in exits)
