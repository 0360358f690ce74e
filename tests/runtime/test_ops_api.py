"""Runner.retry and Runner.wait: the operator's commands from code, on a real SQLite file."""

from __future__ import annotations

from typing import Any

from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, TaskContext, TaskError
from taskfuse.store.sqlite import SQLiteStore

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
