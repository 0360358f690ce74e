"""One event schema for every driver: the same small scenario recorded three ways (the
simulator, a load test on the threaded runtime, and a plain runtime worker with a trace),
every event of every trace checked against `taskfuse.core.events.REQUIRED/OPTIONAL`."""

from __future__ import annotations

import itertools
import textwrap
from collections import Counter
from pathlib import Path

from lab.loadtest.runner import run_loadtest
from lab.scenario import parse_scenario
from lab.simulate.run import run_scenario
from taskfuse.core.breaker import BreakerConfig
from taskfuse.core.events import REQUIRED, schema_problems
from taskfuse.runtime import App, Runner, TaskError
from taskfuse.store.memory import MemoryStore
from taskfuse.trace import read_trace

# Every fuse on, a pool, task and call retries, errors that open the breaker: each event
# kind a run can emit, in a few seconds of real time.
SCENARIO = textwrap.dedent("""\
    name: schema
    seed: 3
    horizon_s: 120
    workers: 3
    task_timeout_s: 5
    retry: {max_retry: 1, backoff: {kind: fixed, base: 0.05, cap: 0.05, jitter: none}}
    pools: {db: {size: 2, acquire_timeout_s: 5}}
    downstreams:
      api:
        provider: {rate: 50, burst: 5, latency: 0.02, errors: {http_503: 0.3}}
        client:
          timeout_s: 0.5
          bulkhead: 2
          rate_limit: {rate: 40, burst: 2}
          breaker: {failure_rate: 0.5, minimum_calls: 4, window_size: 8, open_wait_s: 0.3}
          adaptive: {kind: aimd, min: 1, max: 4}
          retry: {max_retry: 1, backoff: {kind: fixed, base: 0.02, cap: 0.02, jitter: none}}
    batches:
      - id: b
        count: 40
        program:
          - db: {pool: db, query: 0.005}
          - call: {downstream: api}
    """)

#: Kinds every recording of this scenario must contain, by driver.
EXPECTED = {
    "lab": {"submit", "move", "call", "wait", "breaker", "limit", "query"},
    "loadtest": {"submit", "move", "call", "wait", "breaker", "limit", "query"},
    "runtime": {"submit", "move", "call", "breaker"},
}


def _check(path: Path, driver: str) -> Counter[str]:
    kinds: Counter[str] = Counter()
    problems: Counter[str] = Counter()
    for event in read_trace(path).events():
        kinds[event.kind] += 1
        for problem in schema_problems(event):
            problems[problem] += 1
    assert not problems, f"{driver}: {dict(problems)}"
    assert EXPECTED[driver] <= set(kinds), f"{driver}: only {dict(kinds)}"
    return kinds


def _runtime_trace(path: Path) -> None:
    """The same program on a plain Runner: a breaker, a bulkhead and a bucket around a call
    that fails every third time, task retries, a trace written by the runtime's tracer."""
    app = App("schema", default_timeout=5)
    app.downstream("api", bulkhead=2, rate=40, burst=2,
                   breaker=BreakerConfig(minimum_calls=4, window_size=8, open_wait_s=0.3))
    calls = itertools.count()

    @app.task("task", max_retry=1, downstreams=("api",))
    def task(ctx, payload):
        with ctx.downstream("api"):
            if next(calls) % 3 == 0:
                raise TaskError("http_503", "the partner failed")
        return payload

    with Runner(app, MemoryStore(), workers=3, trace=path, trace_interval_s=0.05) as runner:
        runner.submit_batch([runner.spec("task", i) for i in range(30)], "b")
        assert runner.join(timeout=60)


def test_every_driver_writes_the_one_schema(tmp_path: Path) -> None:
    scenario = parse_scenario(SCENARIO, "<schema>")
    run_scenario(scenario, None, tmp_path / "lab.trace")
    run_loadtest(scenario, time_scale=0.5, trace=tmp_path / "loadtest.trace")
    _runtime_trace(tmp_path / "runtime.trace")
    seen = {driver: _check(tmp_path / f"{driver}.trace", driver) for driver in EXPECTED}
    # the call events mean the same thing everywhere: latencies in seconds, "ok" or a kind
    for driver in EXPECTED:
        calls = list(read_trace(tmp_path / f"{driver}.trace").events(kind="call"))
        assert all(0 <= c.value < 5 for c in calls), driver
        assert {c.reason for c in calls} <= {"ok", "http_503", "http_429", "timeout"}, driver
    for driver in ("lab", "loadtest"):  # the provider answers in 20 ms of scenario time
        ok = sorted(c.value for c in read_trace(tmp_path / f"{driver}.trace").events(kind="call")
                    if c.reason == "ok")
        assert 0.015 <= ok[len(ok) // 2] <= 0.2, (driver, ok[len(ok) // 2])
    assert set(REQUIRED) >= set().union(*seen.values())
