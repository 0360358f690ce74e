"""ctx.downstream(name).call(fn): the client's timeout, retries and budget on real threads."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from taskfuse.core.events import EventKind, EventList
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, CallFailed, TaskError, error_kind
from tests.runtime.conftest import JOIN_S


class Flaky:
    """A callable that fails with the given kinds first, then answers; thread-safe."""

    def __init__(self, *failures: str | BaseException) -> None:
        self.failures = list(failures)
        self.timeouts: list[float | None] = []
        self.lock = threading.Lock()

    def __call__(self, value: Any, timeout: float | None = None) -> Any:
        with self.lock:
            self.timeouts.append(timeout)
            failure = self.failures.pop(0) if self.failures else None
        if isinstance(failure, BaseException):
            raise failure
        if failure is not None:
            raise TaskError(failure, "scripted")
        return value


def test_a_call_gets_the_timeout_and_is_retried_by_the_clients_policy(make_runner) -> None:
    app = App()
    app.downstream("partner", timeout_s=0.5, retry={
        "max_retry": 3, "backoff": {"kind": "fixed", "base": 0.001, "jitter": "none"}})
    partner = Flaky("http_429", "http_503")

    @app.task("sync", max_retry=0)
    def sync(ctx, payload):
        return ctx.downstream("partner").call(partner, payload)

    events = EventList()
    runner = make_runner(app, sinks=[events])
    task = runner.submit("sync", "A1")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == "A1"
    assert partner.timeouts == [0.5, 0.5, 0.5]  # fn gets timeout= from the limits
    calls = [e.reason for e in events.of_kind(EventKind.CALL)]
    assert calls == ["http_429", "http_503", "ok"]
    assert runner.clients["partner"].retries == 2


def test_a_call_that_fails_for_good_fails_the_attempt_with_the_last_kind(make_runner) -> None:
    app = App()
    app.downstream("partner", retry={"max_retry": 1, "backoff": {"kind": "none"}})
    partner = Flaky("http_503", "http_401")

    @app.task("sync", max_retry=0)
    def sync(ctx, payload):
        try:
            return ctx.downstream("partner").call(partner, payload)
        except CallFailed as failed:
            assert isinstance(failed.__cause__, TaskError)
            raise

    runner = make_runner(app)
    task = runner.submit("sync", "A1")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.error_kind == "http_401"
    assert "not retryable" in final.error_msg and "partner" in final.error_msg


def test_an_answer_after_the_timeout_counts_as_a_timeout(make_runner) -> None:
    app = App()
    app.downstream("slow", timeout_s=0.02)

    def ignores_its_timeout(timeout: float) -> str:
        time.sleep(timeout * 3)  # a client that does not honour timeout=
        return "late"

    @app.task("sync", max_retry=0)
    def sync(ctx, payload):
        return ctx.downstream("slow").call(ignores_its_timeout)

    events = EventList()
    runner = make_runner(app, sinks=[events])
    task = runner.submit("sync")
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).error_kind == "timeout"
    [call] = events.of_kind(EventKind.CALL)
    assert call.reason == "timeout" and call.value >= 0.06


def test_a_token_budget_stops_retries_until_successes_refill_it(make_runner) -> None:
    app = App()
    app.downstream("partner", retry={
        "max_retry": 5, "backoff": {"kind": "none"},
        "budget": {"kind": "tokens", "capacity": 10, "cost": 5, "refund": 5}})
    partner = Flaky(*["http_503"] * 4)

    @app.task("sync", max_retry=0)
    def sync(ctx, payload):
        return ctx.downstream("partner").call(partner, payload)

    runner = make_runner(app, workers=1)
    first = runner.submit("sync", 1)
    assert runner.join(JOIN_S)
    assert runner.get(first.task_id).error_msg.endswith("retry budget exhausted")
    assert runner.clients["partner"].retries == 2  # 10 tokens, 5 a retry
    second = runner.submit("sync", 2)  # one more 503, then ok: the budget is empty
    assert runner.join(JOIN_S)
    assert runner.get(second.task_id).status is TaskStatus.FAILED
    third = runner.submit("sync", 3)  # answers at once: refunds 5, a retry is possible again
    assert runner.join(JOIN_S)
    assert runner.get(third.task_id).status is TaskStatus.SUCCESS
    assert runner.clients["partner"].budget.tokens == 5


def test_each_runner_has_its_own_seeded_jitter_stream() -> None:
    from taskfuse.runtime import Runner
    from taskfuse.store.memory import MemoryStore

    app = App(seed=3)
    app.downstream("partner", retry={"max_retry": 2})
    a, b = Runner(app, MemoryStore()), Runner(app, MemoryStore())
    assert a.clients["partner"] is not b.clients["partner"]
    assert a.clients["partner"].rng.random() == b.clients["partner"].rng.random()
    unseeded = App()
    unseeded.downstream("partner")
    c, d = Runner(unseeded, MemoryStore()), Runner(unseeded, MemoryStore())
    assert c.clients["partner"].rng.random() != d.clients["partner"].rng.random()


class _Response:
    status_code = 429


class HTTPStatusError(Exception):
    response = _Response()


class ReadTimeout(Exception):
    pass


@pytest.mark.parametrize("exc, kind", [
    (TaskError("http_503"), "http_503"),
    (TimeoutError(), "timeout"),
    (ReadTimeout(), "timeout"),  # httpx / requests name their timeouts so
    (HTTPStatusError(), "http_429"),  # raise_for_status() carries the response
    (ConnectionResetError(), "connection_reset"),
    (ValueError("x"), "ValueError"),
])
def test_error_kinds_of_common_clients(exc: BaseException, kind: str) -> None:
    assert error_kind(exc) == kind
