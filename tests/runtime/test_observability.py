"""What an operator sees of a real run: the trace file, task logs with trace_id, JSON logs."""

from __future__ import annotations

import json
import logging

from taskfuse.core.events import EventKind
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, TaskError
from taskfuse.runtime.logs import JsonFormatter, TextFormatter
from taskfuse.trace import read_trace
from tests.runtime.conftest import JOIN_S


def test_runner_writes_a_trace_the_monitor_can_read(make_runner, tmp_path) -> None:
    app = App()
    app.downstream("partner", bulkhead=2)

    @app.task("call", max_retry=0)
    def call(ctx, payload):
        with ctx.downstream("partner"):
            if payload == "bad":
                raise TaskError("bad_params", "nope")
        return payload

    path = tmp_path / "run.trace"
    runner = make_runner(app, trace=path, trace_interval_s=0.02)
    tasks = [runner.submit("call", i) for i in range(5)] + [runner.submit("call", "bad")]
    assert runner.join(JOIN_S)
    runner.shutdown()
    trace = read_trace(path)
    assert trace.complete and trace.header["source"] == "runtime"
    assert {"queue_depth", "running", "done.SUCCESS", "ds.partner.in_flight"} <= set(
        trace.series_names)
    assert trace.report["counts"]["SUCCESS"] == 5 and trace.report["counts"]["FAILED"] == 1
    _, done = trace.series("done.SUCCESS")
    assert done[-1] == 5
    moves = list(trace.events(kind=EventKind.MOVE, task_id=tasks[0].task_id))
    assert [(e.src, e.dst) for e in moves] == [("PENDING", "RUNNING"), ("RUNNING", "SUCCESS")]
    assert all(e.t >= 0 for e in trace.events())  # seconds since the run started
    assert len(list(trace.events(kind=EventKind.CALL))) == 6


def test_task_logger_carries_trace_and_task_ids(make_runner, caplog) -> None:
    app = App()

    @app.task("talk")
    def talk(ctx, payload):
        ctx.logger.info("syncing %s", payload, extra={"sku": payload})

    runner = make_runner(app)
    with caplog.at_level(logging.INFO, logger="taskfuse.task"):
        task = runner.submit("talk", "A1")
        assert runner.join(JOIN_S)
    [record] = [r for r in caplog.records if r.getMessage() == "syncing A1"]
    assert record.trace_id == task.trace_id and record.task_id == task.task_id
    assert record.sku == "A1" and record.attempt == 1
    line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == task.trace_id and line["msg"] == "syncing A1"
    assert f"[{task.trace_id} {task.task_id}]" in TextFormatter().format(record)


def test_failed_attempt_is_logged_with_its_traceback(make_runner, caplog) -> None:
    app = App()

    @app.task("boom", max_retry=0)
    def boom(ctx, payload):
        raise ValueError("bad row 7")

    runner = make_runner(app)
    with caplog.at_level(logging.WARNING, logger="taskfuse.task"):
        task = runner.submit("boom")
        assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.FAILED
    [record] = [r for r in caplog.records if r.task_id == task.task_id]
    assert record.exc_info is not None and "bad row 7" in JsonFormatter().format(record)


def test_the_sources_alerts_fire_into_the_trace(make_runner, tmp_path) -> None:
    app = App()

    @app.task("bad", max_retry=0)
    def bad(ctx, payload):
        raise TaskError("bad_params", "rejected")

    path = tmp_path / "alerts.trace"
    runner = make_runner(app, trace=path, trace_interval_s=0.02)
    runner.submit_many([runner.spec("bad", i) for i in range(25)])
    assert runner.join(JOIN_S)
    runner.shutdown()
    trace = read_trace(path)
    alerts = list(trace.events(kind=EventKind.ALERT))
    assert [(e.subject, e.dst) for e in alerts] == [("success_rate_low", "firing")]
    _, firing = trace.series("alerts.firing")
    assert firing[-1] == 1
    assert [a[0] for a in trace.report["alerts"]] == ["success_rate_low"]
