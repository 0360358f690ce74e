"""Runner.retry and Runner.wait: the operator's commands from code, on a real SQLite file;
the limits' result bound on both durable stores."""

from __future__ import annotations

from typing import Any

import pytest

from taskfuse.core.scheduler import RESULT_TOO_LARGE
from taskfuse.core.states import TaskStatus
from taskfuse.limits.files import parse_limits
from taskfuse.runtime import App, TaskContext, TaskError
from taskfuse.store.sqlite import SQLiteStore
from tests.store.backends import DURABLE

app = App("ops-api")
#: Payloads that fail until an operator fixes what was wrong (the test clears it).
BROKEN: set[int] = set()


@app.task("sync", max_retry=0, timeout=10)
def sync(ctx: TaskContext, payload: int) -> dict[str, int]:
    if payload in BROKEN:
        raise TaskError("bad_params", f"sku {payload} not configured")
    return {"sku": payload}


def test_wait_sees_failures_then_retry_and_wait_again(make_runner, tmp_path) -> None:
    BROKEN.update({3, 7})
    store = SQLiteStore(tmp_path / "ops.db")
    runner = make_runner(app, store)
    runner.submit_batch([app.spec("sync", i, task_id=f"s{i}") for i in range(10)], "nightly")
    first = runner.wait("nightly", timeout=30)
    assert (first.done, first.status) == (True, "PARTIAL_SUCCESS")
    assert first.counts[TaskStatus.FAILED] == 2
    failed = runner.wait("s3", timeout=30)
    assert (failed.status, failed.task.error_kind) == ("FAILED", "bad_params")
    BROKEN.clear()
    result = runner.retry("nightly", reset_attempts=True)
    assert sorted(t.task_id for t in result.retried) == ["s3", "s7"]
    again = runner.wait("nightly", timeout=30)
    assert (again.done, again.status) == (True, "ALL_SUCCESS")
    assert runner.wait("s7", timeout=30).task.result == {"sku": 7}
    assert runner.retry("nightly").retried == ()  # a no-op now


def test_wait_times_out_without_workers(make_runner, tmp_path) -> None:
    runner: Any = make_runner(app, SQLiteStore(tmp_path / "idle.db"), start=False)
    runner.submit("sync", 1, task_id="later")
    got = runner.wait("later", timeout=0.3)
    assert (got.done, got.status) == (False, "PENDING") and got.waited_s >= 0.3


@pytest.mark.parametrize("kind", list(DURABLE))
def test_the_limits_result_bound_fails_a_larger_result_at_completion(
        kind, make_runner, tmp_path) -> None:
    """`max_result_bytes` in a limits file reaches the runner: a result over it ends its task
    FAILED (not retried: the same code returns the same result) with both sizes in the
    error and nothing stored; one within it is stored whole."""
    bounded = App("bounded", limits=parse_limits("max_result_bytes: 64\n", "limits.yaml"))

    @bounded.task("echo", timeout=10)
    def echo(ctx: TaskContext, payload: int) -> str:
        return "x" * payload

    with DURABLE[kind](tmp_path) as store:
        runner = make_runner(bounded, store)
        runner.submit_batch([bounded.spec("echo", n, task_id=f"e{n}") for n in (10, 100)], "b")
        got = runner.wait("b", timeout=30)
        assert (got.done, got.status) == (True, "PARTIAL_SUCCESS")
        small, big = store.get("e10"), store.get("e100")
        assert (small.status, small.result) == (TaskStatus.SUCCESS, "x" * 10)
        assert (big.status, big.error_kind, big.result, big.retry_count) == (
            TaskStatus.FAILED, RESULT_TOO_LARGE, None, 0)
        assert big.error_msg == ("result of 102 bytes is over the limit of 64 bytes "
                                 "(max_result_bytes): not stored")
