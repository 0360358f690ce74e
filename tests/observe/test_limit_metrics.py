"""The limits a worker runs with, on its /metrics page: configured values and live use."""

from __future__ import annotations

import threading

from taskfuse.limits.files import parse_limits
from taskfuse.observe.prometheus import WorkerMetrics, serve
from taskfuse.runtime import App, TaskError
from tests.observe.conftest import WAIT_S, scrape

LIMITS = """
workers: 3
task_timeout_s: 45
retry: {max_retry: 2}
sweeper: {lease_s: 12}
pools: {batch: {size: 2, acquire_timeout_s: 5}}
downstreams:
  partner:
    client:
      timeout_s: 0.8
      bulkhead: 14
      instances: 2
      rate_limit: {rate: 90, burst: 10}
      breaker: {failure_rate: 0.4, open_wait_s: 7}
      retry: {max_retry: 4, backoff: {kind: none}}
batches: [{id: skus, cap: 5}]
"""


def test_the_limits_and_their_use_are_scraped(make_runner) -> None:
    app = App.from_limits(parse_limits(LIMITS), "metrics")
    holding, release = threading.Event(), threading.Event()
    failures = iter(["http_503", "http_503"])

    def partner(timeout: float) -> str:
        failure = next(failures, None)
        if failure:
            raise TaskError(failure)
        return "ok"

    @app.task("sync")
    def sync(ctx, payload):
        with ctx.pool("batch"):
            holding.set()
            release.wait(WAIT_S)
            return ctx.downstream("partner").call(partner)

    runner = make_runner(app, workers=3, start=False)
    server = serve(WorkerMetrics(runner).registry, 0, addr="127.0.0.1")
    try:
        runner.start()
        runner.submit("sync")
        assert holding.wait(WAIT_S)
        held = scrape(server.url)
        release.set()
        assert runner.join(WAIT_S)
        page = scrape(server.url)
    finally:
        server.close()
    assert held.value("taskfuse_pool_in_use", pool="batch") == 1
    assert page.value("taskfuse_pool_in_use", pool="batch") == 0
    assert page.value("taskfuse_workers_limit") == 3
    limit = {fuse: page.value("taskfuse_limit", downstream="partner", fuse=fuse)
             for fuse in ("bulkhead", "rate", "burst", "timeout_s", "call_max_retry",
                          "breaker_failure_rate", "breaker_open_wait_s", "instances")}
    assert limit == {"bulkhead": 14, "rate": 90, "burst": 10, "timeout_s": 0.8,
                     "call_max_retry": 4, "breaker_failure_rate": 0.4,
                     "breaker_open_wait_s": 7, "instances": 2}
    # the configured value, and this process's share of it
    assert page.value("taskfuse_downstream_bulkhead_limit", downstream="partner") == 7
    assert page.value("taskfuse_pool_limit", pool="batch", fuse="size") == 2
    assert page.value("taskfuse_pool_limit", pool="batch", fuse="acquire_timeout_s") == 5
    assert page.value("taskfuse_task_limit", fuse="timeout_s") == 45
    assert page.value("taskfuse_task_limit", fuse="lease_s") == 12
    assert page.value("taskfuse_task_limit", fuse="heartbeat_s") == 4
    assert page.value("taskfuse_batch_limit", batch="skus", fuse="cap") == 5
    assert page.value("taskfuse_downstream_call_retries_total", downstream="partner") == 2
