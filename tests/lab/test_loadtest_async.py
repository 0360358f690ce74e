"""Load tests of `executor: async` kinds: the scenario's coroutines on the runtime's event
loop, their calls over asyncio stream connections, held to the simulator.

Small counts and short latencies: each real run takes one to three seconds.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from lab.loadtest.connections import AsyncConnections, CallTimeout
from lab.loadtest.runner import run_loadtest
from lab.loadtest.servers import ProviderServers
from lab.scenario import Provider, parse_scenario
from lab.simulate.run import run_scenario

# 400 coroutines at once on a runner of two worker threads: every task makes two calls of
# 0.5 s, then a little local work. The calls are in flight together, far more of them than
# the process has threads.
MANY_IN_FLIGHT = """
name: many-in-flight
seed: 7
horizon_s: 60
sample_interval_s: 0.1
workers: 2
async_concurrency: 400
kinds: {sync: {executor: async}}
downstreams:
  partner:
    provider: {latency: {dist: constant, value: 0.5}}
    client: {timeout_s: 5}
batches:
  - id: skus
    kind: sync
    count: 400
    program:
      - call: {downstream: partner, count: 2}
      - work: 0.05
"""


def _scenario(text: str):  # type: ignore[no-untyped-def]
    return parse_scenario(textwrap.dedent(text), "<test>")


def test_an_async_kind_runs_on_the_event_loop_with_far_fewer_threads_than_calls() -> None:
    """On threads this run needs a thread per call in flight (the runner has two); on the
    event loop the 400 coroutines make their 800 calls with a dozen threads in the process,
    and every count is the simulation's."""
    sc = _scenario(MANY_IN_FLIGHT)
    simulated = run_scenario(sc).report
    real = run_loadtest(sc).report
    extra = real["loadtest"]
    assert extra["executors"] == {"sync": "async"}
    assert extra["workers"] == 1  # no kind runs on a thread: one idle worker thread
    assert extra["loop_lag_max_s"] is not None
    assert extra["gc_threshold"] == 50_000  # the heap as `taskfuse worker` keeps it
    got, want = real["downstreams"]["partner"], simulated["downstreams"]["partner"]
    assert real["tasks"]["SUCCESS"] == simulated["tasks"]["SUCCESS"] == 400
    assert got["calls"] == want["calls"] == 800
    assert got["ok"] == want["ok"] == 800
    # the calls of 0.5 s overlap: far more in flight than the process ever had threads
    assert got["max_in_flight"] >= 200, got
    assert extra["threads_peak"] <= 30, extra["threads_peak"]
    assert got["max_in_flight"] >= 5 * extra["threads_peak"]
    assert extra["servers"]["partner"]["served"] == 800


# A hung coroutine is an await that never returns in time: the runtime cancels it at the
# timeout and its slot is free at once (on a thread it would stay stuck for 60 s).
HUNG = """
name: hung-async
seed: 3
horizon_s: 60
workers: 1
task_timeout_s: 0.5
retry: {max_retry: 0}
kinds: {sync: {executor: async}}
pools:
  db: {size: 2, acquire_timeout_s: 10}
batches:
  - id: jobs
    kind: sync
    count: 6
    program:
      - db: {pool: db, query: 0.05}
      - hang: {probability: 0.5, duration: 60}
"""


def test_a_hung_coroutine_times_out_and_its_db_turns_are_the_pools() -> None:
    """The same attempts hang as in the simulation (its seeded stream), end TIMEOUT at
    their timeout with no stuck worker, and each task's DB step took a turn of the pool of
    two (`async with ctx.pool`), as simulated."""
    sc = _scenario(HUNG)
    simulated = run_scenario(sc).report
    real = run_loadtest(sc).report
    assert real["tasks"]["TIMEOUT"] == simulated["tasks"]["TIMEOUT"] > 0
    assert real["tasks"]["SUCCESS"] == simulated["tasks"]["SUCCESS"] > 0
    assert real["stuck_workers"]["peak"] == 0
    assert real["makespan_s"] < 5.0  # not the 60 s of a hang: canceled at the timeout
    pool, want = real["pools"]["db"], simulated["pools"]["db"]
    assert pool["max_in_use"] == want["max_in_use"] == 2
    assert pool["acquires"] == want["acquires"] == 6


def test_the_async_client_reads_answers_and_drops_a_timed_out_connection() -> None:
    """A call answers (status, error kind, served time); a call that times out raises
    CallTimeout and its connection is not reused (its late answer would be read as the next
    call's), so the next call, on a fresh connection, reads its own answer."""
    slow = Provider.model_validate({"latency": {"dist": "constant", "value": 0.2},
                                    "errors": {"http_503": 1.0}})
    with ProviderServers({"partner": slow}, seed=1) as servers:
        servers.begin(0.0)
        http = AsyncConnections(servers.url("partner"))

        async def calls() -> tuple[object, tuple[int, str | None, float | None], int]:
            try:
                await http.get({}, 0.05)
                timed_out: object = None
            except CallTimeout as exc:
                timed_out = exc
            answer = await http.get({"X-Trace-Id": "t1"}, 2.0)
            return timed_out, answer, len(http._all)

        timed_out, (status, kind, served), open_ = asyncio.run(calls())
        http.close()
    assert isinstance(timed_out, CallTimeout)
    assert (status, kind) == (503, "http_503")
    assert served is not None and served >= 0.2
    assert open_ == 1  # the timed-out connection was closed, the second one kept


@pytest.mark.parametrize("executor", ["thread", "async"])
def test_the_program_draws_the_same_on_either_executor(executor: str) -> None:
    """One compiled program for both interpreters: a drawn call count gives the same
    number of calls on a thread as in a coroutine (and as simulated)."""
    text = MANY_IN_FLIGHT.replace("{executor: async}", f"{{executor: {executor}}}")
    text = text.replace("count: 400", "count: 20").replace("async_concurrency: 400\n", "")
    text = text.replace("count: 2}", "count: {dist: integers, low: 0, high: 3}}")
    text = text.replace("workers: 2", "workers: 20").replace("value: 0.5", "value: 0.05")
    sc = _scenario(text)
    simulated = run_scenario(sc).report["downstreams"]["partner"]["calls"]
    real = run_loadtest(sc).report
    assert real["loadtest"]["executors"] == {"sync": executor}
    assert real["downstreams"]["partner"]["calls"] == simulated
