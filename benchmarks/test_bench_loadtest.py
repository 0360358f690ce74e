"""The load test's own cost with many calls in flight: a kind on threads beside the same
kind on the event loop (`executor: async`), side by side in one run.

A scenario of N tasks arriving at once, each making one call of CALL_S to an emulated
provider; the thread kind has N worker threads, the async kind `async_concurrency` N.
Ideal makespan: CALL_S. `extra_info`: the real run's makespan over the ideal, the harness's
overhead per call (p50 and p99 of the latency the client measured less the time the
provider says it spent, real milliseconds: `lab.loadtest.harness`), the worker process's
CPU per call, and its peak thread count. What it shows: past a thousand calls in flight
the threaded load test spends its CPU switching threads and smears its calls (the
metastable run's +61 % run p99, issue 24), where one event loop does not.

    python -m pytest benchmarks/test_bench_loadtest.py --benchmark-only
    TASKFUSE_BENCH_LOADTEST_N=4000 python -m pytest benchmarks/test_bench_loadtest.py ...
"""

from __future__ import annotations

import os
import textwrap
import time
from typing import Any

import pytest

from lab.loadtest.runner import run_loadtest
from lab.scenario import parse_scenario

N = int(os.environ.get("TASKFUSE_BENCH_LOADTEST_N", "2000"))
CALL_S = 1.0

SCENARIO = """
name: in-flight
seed: 1
horizon_s: 120
sample_interval_s: 0.5
workers: {n}
async_concurrency: {n}
kinds: {{call: {{executor: {executor}}}}}
downstreams:
  partner:
    provider: {{latency: {{dist: constant, value: {call_s}}}}}
    client: {{timeout_s: 30}}
batches:
  - {{id: b, kind: call, count: {n}, program: [{{call: {{downstream: partner}}}}]}}
"""


@pytest.mark.parametrize("executor", ["thread", "async"])
def test_loadtest_calls_in_flight(benchmark: Any, executor: str) -> None:
    text = SCENARIO.format(n=N, executor=executor, call_s=CALL_S)
    if executor == "thread":  # async_concurrency applies to executor: async only
        text = text.replace(f"async_concurrency: {N}\n", "")
    sc = parse_scenario(textwrap.dedent(text), "<bench>")
    benchmark.group = f"loadtest: {N} calls of {CALL_S:g} s in flight at once"
    out: dict[str, Any] = {}

    def run() -> None:
        cpu = time.process_time()
        out["report"] = run_loadtest(sc).report
        out["cpu"] = time.process_time() - cpu

    benchmark.pedantic(run, rounds=1, iterations=1)
    report = out["report"]
    harness = report["loadtest"]["harness"]["calls"]["partner"]
    calls = report["downstreams"]["partner"]["calls"]
    assert report["tasks"]["SUCCESS"] == N
    info = benchmark.extra_info
    info["makespan_over_ideal"] = round(report["makespan_s"] / CALL_S, 3)
    info["overhead_p50_ms"] = round(1000 * harness["overhead_p50_s"], 2)
    info["overhead_p99_ms"] = round(1000 * harness["overhead_p99_s"], 2)
    info["cpu_ms_per_call"] = round(1000 * out["cpu"] / calls, 3)
    info["threads_peak"] = report["loadtest"]["threads_peak"]
