"""An App from a limits file: one description of the fuses, applied where each belongs."""

from __future__ import annotations

import pytest

from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.states import TaskStatus
from taskfuse.limits.build import build_guard
from taskfuse.limits.files import parse_limits
from taskfuse.limits.schema import ClientLimits
from taskfuse.runtime import App, Runner, RuntimeConfigError
from taskfuse.store.memory import MemoryStore
from tests.runtime.conftest import JOIN_S

LIMITS = """
workers: 6
task_timeout_s: 90
retry: {max_retry: 4, backoff: {kind: fixed, base: 0.5, jitter: none}}
kinds:
  sync: {timeout_s: 30, max_retry: 1, priority: 5}
  report: {retry: {max_retry: 7}}
sweeper: {interval_s: 10, lease_s: 12, max_pending_age_s: 3600}
alerts: {running_limit: 40, queue_depth: 50, success_rate: 0.9, min_finished: 5}
pools:
  batch: {size: 4, acquire_timeout_s: 2}
downstreams:
  partner:
    client:
      timeout_s: 1.5
      bulkhead: 14
      rate_limit: {rate: 90, burst: 10}
      breaker: {failure_rate: 0.5, open_wait_s: 5}
      retry: {max_retry: 3}
batches:
  - {id: skus, cap: 2, priority: 3, timeout_s: 20, max_retry: 0}
"""


def _app() -> App:
    app = App.from_limits(parse_limits(LIMITS), "sync-app")
    for kind in ("sync", "report", "other"):
        app.task(kind, timeout=99, max_retry=9)(lambda ctx, payload: payload)
    return app


def test_code_and_file_describe_a_downstream_with_one_type() -> None:
    app = App()
    made = app.downstream("partner", bulkhead=14, rate=90, burst=10, timeout_s=1.5,
                          breaker=BreakerConfig(open_wait_s=5), retry={"max_retry": 3})
    assert isinstance(made, ClientLimits)
    from_file = _app().downstreams["partner"]
    assert made.model_dump() == from_file.model_dump()
    guard = app.scheduler(MemoryStore()).guards["partner"]
    same = build_guard("partner", from_file, 0.0)
    assert (guard.bulkhead.limit, guard.bucket.rate, guard.bucket.burst) == (
        same.bulkhead.limit, same.bucket.rate, same.bucket.burst)
    assert guard.breaker.config == same.breaker.config


def test_kind_then_batch_then_caller_decide_a_tasks_fields() -> None:
    app = _app()
    sync = app.spec("sync")
    assert (sync.timeout, sync.max_retry, sync.priority) == (30, 1, 5)  # the file's kind
    other = app.spec("other")
    assert (other.timeout, other.max_retry, other.priority) == (99, 9, 0)  # the code's
    in_batch = app.spec("sync", batch_id="skus")
    assert (in_batch.timeout, in_batch.max_retry, in_batch.priority) == (20, 0, 3)
    mine = app.spec("sync", batch_id="skus", timeout=7, priority=1)
    assert (mine.timeout, mine.max_retry, mine.priority) == (7, 0, 1)


def test_policies_sweeper_and_heartbeat_come_from_the_file() -> None:
    app = _app()
    sched = app.scheduler(MemoryStore())
    assert sched.policy.max_retry == 4 and sched.policy_for("report").max_retry == 7
    assert not sched.policy.is_retryable("unknown_kind")  # the runtime's own kinds stay fatal
    assert (sched.config.default_timeout, sched.config.lease_s,
            sched.config.max_pending_age_s) == (90, 12, 3600)
    assert app.heartbeat_s == 4  # a third of the lease
    runner = Runner(app, MemoryStore())
    assert runner.heartbeat.every_s == 4
    assert set(runner.clients) == {"partner"} and runner.clients["partner"].timeout_s == 1.5
    assert runner.pools["batch"].size == 4 and app.pool_size("batch") == 4


def test_a_batch_named_in_the_file_gets_its_cap_at_submit(make_runner) -> None:
    app = _app()
    runner = make_runner(app, start=False)
    runner.submit_many([runner.spec("other", i) for i in range(3)], batch_id="skus")
    batch = runner.store.get_batch("skus")
    assert batch is not None and batch.cap == 2
    stored = runner.store.batch_tasks("skus", (TaskStatus.PENDING,))
    assert {(t.timeout, t.max_retry, t.priority) for t in stored} == {(99, 9, 3)}
    runner.submit_batch([runner.spec("other", 9)], "mine", cap=5)
    assert runner.store.get_batch("mine").cap == 5
    runner.start()
    assert runner.join(JOIN_S)


def test_configure_lays_the_file_over_the_code() -> None:
    app = App("x", lease_s=5.0)
    app.downstream("partner", bulkhead=3, rate=10)
    app.downstream("bank", bulkhead=1)
    app.configure(parse_limits("""
downstreams:
  partner: {client: {bulkhead: 14}}
sweeper: {interval_s: 7}
"""))
    partner = app.downstreams["partner"]
    assert partner.bulkhead == 14 and partner.rate_limit.rate == 10  # fuse by fuse
    assert app.downstreams["bank"].bulkhead == 1  # only in code: kept
    assert app.limits.sweeper.lease_s == 5.0 and app.limits.sweeper.interval_s == 7


def test_a_configuration_that_contradicts_itself_is_one_line() -> None:
    app = App()
    app.downstream("partner", bulkhead=4, instances=2)  # valid, and so is the file alone
    with pytest.raises(RuntimeConfigError) as err:
        app.configure(parse_limits("downstreams: {partner: {client: {scope: fleet, bulkhead: 8}}}"))
    assert "\n" not in str(err.value) and "instances" in str(err.value)
    with pytest.raises(RuntimeConfigError, match="burst needs a rate"):
        app.downstream("partner", burst=3)


def test_the_runtime_trace_alerts_with_the_files_thresholds(tmp_path) -> None:
    from taskfuse.runtime.tracing import RuntimeTrace

    runner = Runner(_app(), MemoryStore())
    trace = RuntimeTrace(runner, tmp_path / "t.trace")
    try:
        rules = {r.name: r for r in trace.alerts.rules}
        assert rules["running_above_limit"].threshold == 40
        assert rules["queue_depth_high"].threshold == 50
        assert rules["success_rate_low"].threshold == 0.9
        assert rules["success_rate_low"].min_samples == 5
    finally:
        trace.close()


def test_the_start_line_summarises_the_limits() -> None:
    line = _app().describe()
    for words in ("workers 6", "task timeout 90s", "retries 4", "lease 12s",
                  "partner: bulkhead 14, rate 90/s burst 10", "timeout 1.5s",
                  "call retries 3", "pool batch 4", "batch skus cap 2"):
        assert words in line, words
