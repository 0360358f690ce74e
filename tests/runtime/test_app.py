"""The registry and the exception -> Outcome mapping (no threads needed)."""

from __future__ import annotations

import pytest

from taskfuse.core.states import TaskfuseError
from taskfuse.runtime import (
    App,
    DownstreamRejected,
    RuntimeConfigError,
    TaskCanceled,
    TaskError,
    UnknownKind,
    outcome_of,
)
from taskfuse.runtime.errors import MAX_ERROR_MSG


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TaskError("http_429", "slow down"), "http_429"),
        (TimeoutError("read timed out"), "timeout"),
        (ConnectionResetError(104, "reset"), "connection_reset"),
        (DownstreamRejected("partner", 12.0), "breaker_open"),
        (TaskCanceled(), "canceled"),
        (UnknownKind("x", []), "unknown_kind"),
        (ZeroDivisionError("division by zero"), "ZeroDivisionError"),
    ],
)
def test_exceptions_map_to_error_kinds(exc: Exception, kind: str) -> None:
    outcome = outcome_of(exc)
    assert not outcome.ok and outcome.error_kind == kind and outcome.error_msg


def test_long_error_messages_are_clipped() -> None:
    outcome = outcome_of(RuntimeError("x" * 10_000))
    assert len(outcome.error_msg) == MAX_ERROR_MSG


def test_registration_defaults_fill_the_spec() -> None:
    app = App()

    @app.task("sync", timeout=7, max_retry=1, downstreams=("partner",), priority=3)
    def sync(ctx, payload):
        return payload

    spec = app.spec("sync", {"sku": 1}, priority=9)
    assert (spec.timeout, spec.max_retry, spec.downstreams, spec.priority) == (
        7, 1, ("partner",), 9)
    assert sync(None, 5) == 5  # the decorator returns the function unchanged


def test_registry_mistakes_are_clear_errors() -> None:
    app = App()
    app.task("a")(lambda ctx, p: None)
    with pytest.raises(RuntimeConfigError, match="'a' is already registered"):
        app.task("a")
    with pytest.raises(UnknownKind, match=r"kind 'b' \(registered: a\)"):
        app.spec("b")
    with pytest.raises(RuntimeConfigError, match=r"downstream 'db': bulkhead: .*1, got 0"):
        app.downstream("db", bulkhead=0)
    assert issubclass(RuntimeConfigError, TaskfuseError)


def test_runtime_mistakes_are_fatal_under_any_policy() -> None:
    from taskfuse.core.retry import RetryPolicy

    app = App(policy=RetryPolicy(fatal=frozenset()))
    assert not app.policy.is_retryable("unknown_kind")
    assert not app.policy.is_retryable("bad_config")
    assert app.policy.is_retryable("http_503")


def test_schedulers_mint_distinct_ids_in_every_process() -> None:
    from taskfuse.core.task import TaskSpec
    from taskfuse.store.memory import MemoryStore

    a, b = App().scheduler(MemoryStore()), App().scheduler(MemoryStore())
    ta, tb = a.submit(TaskSpec("k"), 0.0), b.submit(TaskSpec("k"), 0.0)
    assert ta.task_id != tb.task_id and ta.trace_id != tb.trace_id
