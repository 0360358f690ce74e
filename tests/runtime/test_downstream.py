"""ctx.downstream(name): the core's bulkhead and breaker applied around real calls."""

from __future__ import annotations

import threading
import time

from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.events import EventKind, EventList
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, TaskError
from tests.runtime.conftest import JOIN_S
from tests.runtime.test_orchestration import Concurrency


def test_bulkhead_is_never_exceeded_under_16_threads(make_runner) -> None:
    app = App()
    app.downstream("partner", bulkhead=3)
    inside = Concurrency()

    @app.task("call")
    def call(ctx, payload):
        with ctx.downstream("partner"), inside:
            time.sleep(0.005)
        return payload

    events = EventList()
    runner = make_runner(app, workers=16, sinks=[events])
    runner.submit_many([runner.spec("call", i) for i in range(64)])
    assert runner.join(JOIN_S)
    assert inside.peak == 3
    guard = runner.scheduler.guards["partner"]
    assert guard.bulkhead.max_in_use == 3 and guard.in_flight == 0
    assert runner.counts()[TaskStatus.SUCCESS] == 64
    assert [e for e in events.of_kind(EventKind.WAIT) if e.reason == "bulkhead"]  # queued
    calls = events.of_kind(EventKind.CALL)
    assert len(calls) == 64 and {e.reason for e in calls} == {"ok"}


def test_exception_inside_a_call_is_recorded_as_a_failed_call(make_runner) -> None:
    app = App()
    app.downstream("partner", bulkhead=2)

    @app.task("call", max_retry=0)
    def call(ctx, payload):
        with ctx.downstream("partner"):
            raise TaskError("http_429", "slow down")

    events = EventList()
    runner = make_runner(app, sinks=[events])
    task = runner.submit("call")
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).error_kind == "http_429"
    [call_event] = events.of_kind(EventKind.CALL)
    assert call_event.reason == "http_429" and call_event.subject == "partner"
    assert runner.scheduler.guards["partner"].in_flight == 0  # the permit came back


def test_open_breaker_defers_without_using_an_attempt_then_recovers(make_runner) -> None:
    app = App()
    app.downstream("flaky", breaker=BreakerConfig(
        failure_rate=0.5, window_size=4, minimum_calls=2, open_wait_s=0.2, half_open_probes=1))
    failing = threading.Event()
    failing.set()

    @app.task("call", max_retry=0)
    def call(ctx, payload):
        with ctx.downstream("flaky"):
            if failing.is_set():
                raise ConnectionResetError("peer reset")
        return "ok"

    events = EventList()
    runner = make_runner(app, sinks=[events])
    tripping = [runner.submit("call") for _ in range(2)]
    assert runner.join(JOIN_S)
    assert {runner.get(t.task_id).error_kind for t in tripping} == {"connection_reset"}
    failing.clear()
    task = runner.submit("call")  # declares no downstream: claimed, then refused at admit
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.retry_count == 0
    reasons = [e.reason for e in events.for_task(task.task_id) if e.kind == EventKind.MOVE]
    assert "deferred: breaker open" in reasons
    changes = [(e.src, e.dst) for e in events.of_kind(EventKind.BREAKER)]
    assert changes == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]


def test_tasks_declaring_a_blocked_downstream_wait_pending(make_runner) -> None:
    app = App()
    app.downstream("flaky", breaker=BreakerConfig(
        failure_rate=0.5, window_size=2, minimum_calls=1, open_wait_s=0.2, half_open_probes=1))
    attempts: list[int] = []

    @app.task("call", max_retry=0, downstreams=("flaky",))
    def call(ctx, payload):
        attempts.append(ctx.attempt)
        with ctx.downstream("flaky"):
            if payload == "trip":
                raise TaskError("http_503", "down")
        return payload

    runner = make_runner(app, workers=1)
    runner.submit("call", "trip")
    assert runner.join(JOIN_S)
    later = [runner.submit("call", i) for i in range(3)]
    assert runner.join(JOIN_S)
    assert [runner.get(t.task_id).status for t in later] == [TaskStatus.SUCCESS] * 3
    assert attempts == [1, 1, 1, 1]  # held PENDING while open, never refused mid-run


def test_unknown_downstream_is_a_configuration_error(make_runner) -> None:
    app = App()

    @app.task("call")
    def call(ctx, payload):
        with ctx.downstream("nowhere"):
            return "unreachable"

    runner = make_runner(app)
    task = runner.submit("call")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.error_kind == "bad_config"
    assert "nowhere" in final.error_msg and final.retry_count == 0
