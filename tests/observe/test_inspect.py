"""`taskfuse inspect TRACE_ID` finds a task by its trace id and prints its whole history."""

from __future__ import annotations

import json
import re

from taskfuse.cli import main
from taskfuse.core.retry import Backoff, BackoffKind, RetryPolicy
from taskfuse.runtime import App, TaskError
from taskfuse.store.sqlite import SQLiteStore
from tests.observe.conftest import WAIT_S


def test_inspect_by_trace_id_prints_every_move_of_the_task(make_runner, tmp_path, capsys) -> None:
    app = App(policy=RetryPolicy(max_retry=2, backoff=Backoff(BackoffKind.FIXED, base=0.01)))
    tries: list[int] = []

    @app.task("sync")
    def sync(ctx, payload):
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TaskError("http_503", "partner busy")
        return "ok"

    db, trace = tmp_path / "tasks.db", tmp_path / "run.trace"
    runner = make_runner(app, store=SQLiteStore(db), trace=trace, trace_interval_s=0.05)
    task = runner.submit("sync", "A1")
    other = runner.submit("sync", "B2")
    assert runner.join(WAIT_S)
    runner.shutdown()

    url = f"sqlite:///{db}"
    assert main(["inspect", "--store", url, task.trace_id, "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^trace_id +{task.trace_id}$", out, re.M)
    assert "ended SUCCESS" in out and "1 earlier attempt ended in error" in out
    from tui.fleet import record_history  # the monitor tells the record the same way
    told = out.split("history (from the record):\n")[1].split("\n\nevents from")[0]
    with SQLiteStore(db) as store:
        stored = store.get(task.task_id)
    assert [line.split("  ", 2)[-1].strip() for line in told.splitlines()] == [
        h.what for h in record_history(stored)]
    moves = re.findall(r"(?:(\w+) )?-> (\w+)", out.split("events from")[1])
    assert moves == [("", "PENDING"), ("PENDING", "RUNNING"), ("RUNNING", "PENDING"),
                     ("PENDING", "RUNNING"), ("RUNNING", "SUCCESS")]
    assert "retryable 'http_503'" in out and other.task_id not in out

    assert main(["inspect", "--store", url, task.trace_id, "--trace", str(trace), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["task_id"] for t in data["tasks"]] == [task.task_id]
    assert {e["task_id"] for e in data["events"]} == {task.task_id}
