"""The exporter of a running in-process worker, scraped over HTTP and checked against the store."""

from __future__ import annotations

import random
import re
import threading

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest

from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.events import Event, EventKind, EventList
from taskfuse.core.retry import Backoff, BackoffKind, RetryPolicy
from taskfuse.core.scheduler import Scheduler, SchedulerConfig
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.observe.alerts import rules_path
from taskfuse.observe.prometheus import WorkerMetrics, retry_kind, serve
from taskfuse.runtime import App, Runner, TaskError
from taskfuse.store.memory import MemoryStore
from tests.observe.conftest import WAIT_S, scrape, wait_for

FAST_RETRY = RetryPolicy(max_retry=2, backoff=Backoff(BackoffKind.FIXED, base=0.01))


@pytest.fixture
def served(make_runner):
    """A runner (not started) with its metrics served on a free loopback port."""
    servers = []

    def make(app: App, **kw) -> tuple[Runner, str]:
        runner = make_runner(app, start=False, **kw)
        server = serve(WorkerMetrics(runner).registry, 0, addr="127.0.0.1")
        servers.append(server)
        runner.start()
        return runner, server.url

    yield make
    for server in servers:
        server.close()


def _store_counts(runner: Runner) -> dict[str, int]:
    return {s.value: n for s, n in runner.counts().items()}


def test_running_and_queue_depth_come_from_the_store(served) -> None:
    app = App()
    app.downstream("partner", bulkhead=2, rate=1000, burst=10, breaker=BreakerConfig())
    gate = threading.Event()

    @app.task("hold", downstreams=("partner",))
    def hold(ctx, payload):
        with ctx.downstream("partner"):
            gate.wait(WAIT_S)
        return payload

    runner, url = served(app, workers=2)
    runner.submit_batch([runner.spec("hold", i) for i in range(5)], "skus")
    wait_for(lambda: runner.counts()[TaskStatus.RUNNING] == 2, "two tasks running")

    page = scrape(url)
    counts = _store_counts(runner)
    assert counts["RUNNING"] == 2 and counts["PENDING"] == 3
    for status, n in counts.items():
        assert page.value("taskfuse_tasks", status=status) == n
    assert page.value("taskfuse_tasks_running") == 2
    assert page.value("taskfuse_queue_depth") == 3
    assert page.get("taskfuse_success_ratio") is None  # nothing finished: no made-up ratio
    assert page.value("taskfuse_worker_threads") == 2
    assert page.value("taskfuse_worker_busy_threads") == 2
    assert page.value("taskfuse_downstream_bulkhead_in_use", downstream="partner") == 2
    assert page.value("taskfuse_downstream_bulkhead_limit", downstream="partner") == 2
    assert page.value("taskfuse_downstream_breaker_state", downstream="partner",
                      state="closed") == 1
    assert page.value("taskfuse_downstream_breaker_state", downstream="partner",
                      state="open") == 0
    assert page.value("taskfuse_downstream_tokens", downstream="partner") <= 10
    assert page.value("taskfuse_store_up") == 1

    gate.set()
    assert runner.join(WAIT_S)
    page = scrape(url)
    assert page.value("taskfuse_tasks", status="SUCCESS") == 5
    assert page.value("taskfuse_tasks_running") == 0 and page.value("taskfuse_queue_depth") == 0
    assert page.value("taskfuse_success_ratio") == 1.0
    assert page.value("taskfuse_tasks_finished_total", status="SUCCESS") == 5
    assert page.value("taskfuse_task_duration_seconds_count", batch="skus") == 5
    assert page.value("taskfuse_task_duration_seconds_bucket", batch="skus", le="+Inf") == 5
    assert page.value("taskfuse_downstream_calls_total", downstream="partner") == 5
    assert page.value("taskfuse_downstream_bulkhead_in_use", downstream="partner") == 0


def test_retries_errors_429s_and_the_breaker_by_kind(served) -> None:
    app = App(policy=FAST_RETRY)
    app.downstream("partner", breaker=BreakerConfig(minimum_calls=2, window_size=2,
                                                     open_wait_s=60))
    app.downstream("bank")
    tries: dict[str, int] = {}

    @app.task("sync", max_retry=2)
    def sync(ctx, payload):
        tries[payload] = tries.get(payload, 0) + 1
        with ctx.downstream("bank"):
            if payload == "throttled" and tries[payload] == 1:
                raise TaskError("http_429", "slow down")
            if payload == "bad":
                raise TaskError("bad_params", "no such SKU")
        return payload

    @app.task("probe", max_retry=0)
    def probe(ctx, payload):
        with ctx.downstream("partner"):
            raise ConnectionResetError("partner hung up")

    runner, url = served(app, workers=2)
    for payload in ("ok", "throttled", "bad"):
        runner.submit("sync", payload)
    runner.submit_many([runner.spec("probe", i) for i in range(2)])
    assert runner.join(WAIT_S)

    page = scrape(url)
    counts = _store_counts(runner)
    assert counts["SUCCESS"] == 2 and counts["FAILED"] == 3
    assert page.value("taskfuse_success_ratio") == pytest.approx(2 / 5)
    assert page.value("taskfuse_tasks_finished_total", status="FAILED") == 3
    assert page.value("taskfuse_task_retries_total", kind="http_429") == 1
    assert page.get("taskfuse_task_retries_total", kind="bad_params") is None  # fatal
    assert page.value("taskfuse_downstream_calls_total", downstream="bank") == 4
    assert page.value("taskfuse_downstream_http_429_total", downstream="bank") == 1
    assert page.value("taskfuse_downstream_errors_total", downstream="bank",
                      kind="http_429") == 1
    assert page.value("taskfuse_downstream_errors_total", downstream="bank",
                      kind="bad_params") == 1
    assert page.value("taskfuse_downstream_errors_total", downstream="partner",
                      kind="connection_reset") == 2
    assert page.value("taskfuse_downstream_breaker_state", downstream="partner",
                      state="open") == 1
    assert page.value("taskfuse_downstream_breaker_transitions_total", downstream="partner",
                      state="open") == 1
    assert page.get("taskfuse_downstream_breaker_state", downstream="bank",
                    state="open") is None  # no breaker configured: no series


def test_metrics_live_on_their_own_registry(make_runner) -> None:
    app = App()
    first = WorkerMetrics(make_runner(app, start=False))
    second = WorkerMetrics(make_runner(app, start=False))  # no "Duplicated timeseries"
    assert b"taskfuse_" not in generate_latest(REGISTRY)
    assert b"taskfuse_queue_depth" in generate_latest(first.registry)
    assert first.registry is not second.registry


def test_a_failing_store_is_a_gauge_not_a_failed_scrape(served, tmp_path) -> None:
    from taskfuse.store.sqlite import SQLiteStore

    app = App()
    app.task("noop")(lambda ctx, payload: None)
    store = SQLiteStore(tmp_path / "tasks.db")
    runner, url = served(app, store=store, workers=1)
    assert scrape(url).value("taskfuse_store_up") == 1
    answered = scrape(url).value("taskfuse_store_last_answer_timestamp_seconds")
    runner.shutdown(grace_s=1.0)
    store.close()  # the database is gone; the endpoint must still answer
    page = scrape(url)
    assert page.value("taskfuse_store_up") == 0
    assert page.value("taskfuse_queue_depth") == 0  # the last known value, and from when
    assert page.value("taskfuse_store_last_answer_timestamp_seconds") >= answered
    assert page.value("taskfuse_worker_threads") == 1


def test_the_rules_file_reads_only_series_the_exporter_writes(served) -> None:
    app = App()
    app.task("noop")(lambda ctx, payload: None)
    runner, url = served(app, workers=1)
    runner.submit_batch([runner.spec("noop")], "b1")
    assert runner.join(WAIT_S)
    exposed = scrape(url).names()
    doc = yaml.safe_load(rules_path().read_text("utf-8"))
    exprs = " ".join(r["expr"] for g in doc["groups"] for r in g["rules"])
    used = set(re.findall(r"\btaskfuse_[a-z_]+", exprs))
    assert used and used <= exposed, used - exposed


# -- retry kinds: the reasons the core writes, pinned ----------------------------------------


def _one_move(policy: RetryPolicy, outcome: Outcome | None, lease_s: float | None = None):
    """Run one task through a real Scheduler and answer its RUNNING -> PENDING move."""
    events = EventList()
    sched = Scheduler(MemoryStore(), policy=policy, sinks=[events], rng=random.Random(1),
                      config=SchedulerConfig(lease_s=lease_s))
    task = sched.submit(TaskSpec("k", max_retry=2), 0.0)
    sched.claim("w", 0.0)
    running = sched.store.get(task.task_id)
    if outcome is None:
        sched.sweep(1000.0)  # the lease lapsed: orphaned
    else:
        sched.complete(running, outcome, 1.0)
    [move] = [e for e in events.of_kind(EventKind.MOVE) if e.src == "RUNNING"]
    return move


def test_retry_kind_reads_the_reasons_the_core_writes() -> None:
    move = _one_move(FAST_RETRY, Outcome.failure("http_503", "busy"))
    assert move.dst == "PENDING" and retry_kind(move.reason) == "http_503"
    move = _one_move(FAST_RETRY, Outcome.failure("SomeNewError", "?"))  # unknown: retryable
    assert retry_kind(move.reason) == "SomeNewError"
    move = _one_move(FAST_RETRY, None, lease_s=10.0)
    assert move.dst == "PENDING" and retry_kind(move.reason) == "orphaned"
    move = _one_move(FAST_RETRY, Outcome.failure("breaker_open", "open"))
    assert move.dst == "PENDING" and retry_kind(move.reason) is None  # deferred, no attempt
    assert retry_kind(FAST_RETRY.decide_timeout(0, random.Random(1)).reason) == "timeout"
    assert retry_kind("shutdown") is None and retry_kind(None) is None


def test_starts_of_tasks_ended_elsewhere_are_forgotten(make_runner) -> None:
    """A worker whose running tasks keep being cancelled by others must not grow forever."""
    runner = make_runner(App(), start=False, workers=2)
    metrics = WorkerMetrics(runner)
    for i in range(2500):  # claimed here, then ended by another process: no event here
        metrics(Event(float(i), EventKind.MOVE, f"t{i}", None, "x", "PENDING", "RUNNING"))
    assert len(metrics._started) <= 1002 and "t2499" in metrics._started
    metrics(Event(2600.0, EventKind.MOVE, "t2499", "b", "x", "RUNNING", "SUCCESS"))
    page = generate_latest(metrics.registry).decode()
    assert 'taskfuse_task_duration_seconds_count{batch="b"} 1.0' in page
