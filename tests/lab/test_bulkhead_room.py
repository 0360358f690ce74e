"""A simulated claim's room under bulkheads: the runtime's rule (`claim_room`), so a task the
runtime would leave PENDING is not claimed to wait for a permit with its timeout running."""

from __future__ import annotations

import textwrap

from lab.model.arrivals import guarded
from lab.scenario import parse_scenario
from lab.simulate.sim import Simulation

from .conftest import simulate

FUNNEL = """
name: funnel
horizon_s: 600
workers: {workers}
async_concurrency: 20
task_timeout_s: 3
retry: {{max_retry: 0}}
kinds:
  t: {{executor: {executor}}}
  other: {{executor: {executor}}}
downstreams:
  partner:
    provider: {{latency: 1.0}}
    client: {{timeout_s: 5, bulkhead: {bulkhead}}}
batches:
  - id: calls
    kind: t
    count: {count}
    program:
      - call: {{downstream: partner, count: 1}}
{others}
"""

OTHERS = """
  - id: others
    kind: other
    count: 8
    program:
      - work: 1.0
"""


def funnel(executor: str = "async", workers: int = 2, bulkhead: int = 4, count: int = 40,
           others: bool = False) -> str:
    return FUNNEL.format(executor=executor, workers=workers, bulkhead=bulkhead, count=count,
                         others=OTHERS if others else "")


def test_coroutines_wait_pending_not_for_a_permit() -> None:
    """40 one-second calls, 20 coroutine slots, a bulkhead of 4, a 3 s timeout: a claim
    brings only the bulkhead's room, so nothing waits for a permit and nothing times out
    (before the rule the loop claimed 20 at once, and 16 of every 20 timed out waiting)."""
    r = simulate(funnel()).report
    assert r["tasks"]["SUCCESS"] == 40 and r["tasks"]["TIMEOUT"] == 0
    assert r["async"]["peak_in_flight"] == 4
    assert r["makespan_s"] == 10.0  # 40 calls / 4 permits x 1 s
    assert r["run_s"]["p99"] == 1.0  # no attempt waited for a permit inside its run


def test_threads_skip_a_full_bulkheads_tasks_and_take_others() -> None:
    """8 worker threads, 8 calls through a bulkhead of 2, 8 tasks that call nothing: while
    two calls are held, claims bring the other tasks; no attempt waits for a permit."""
    r = simulate(funnel(executor="thread", workers=8, bulkhead=2, count=8, others=True)).report
    assert r["tasks"]["SUCCESS"] == 16 and r["tasks"]["TIMEOUT"] == 0
    assert r["run_s"]["p99"] == 1.0
    assert r["makespan_s"] == 4.0  # the calls, 2 at a time; the others beside them


def test_holds_come_back_to_zero_through_timeouts_and_crashes() -> None:
    """Attempts that hang past their timeout (stuck threads) and workers that crash with
    tasks claimed ahead each let their hold go once: nothing is held when the run ends."""
    text = funnel(executor="thread", workers=6, bulkhead=3, count=60)
    text = text.replace("retry: {max_retry: 0}", "retry: {max_retry: 1}\nclaim_batch: 3\n"
                        "sweeper: {interval_s: 5, lease_s: 10}\nfaults:\n"
                        "  - {kind: worker_crash, at_s: 4.5, workers: 2}")
    text = text.replace("      - call: {downstream: partner, count: 1}",
                        "      - call: {downstream: partner, count: 1}\n"
                        "      - hang: {probability: 0.2, duration: 6.0}")
    sim = Simulation(parse_scenario(textwrap.dedent(text), "<test>"))
    sim.run()
    assert sim.stats.stuck_peak > 0 and sim.stats.crashed_workers == 2  # both paths taken
    assert sim.holds.held == {"partner": 0}


def test_a_tasks_downstreams_are_those_a_claim_must_know() -> None:
    """Downstreams with a breaker (gating) or a bulkhead (a claim's room), in call order;
    one with neither is not among them."""
    sc = parse_scenario(textwrap.dedent("""
        name: d
        horizon_s: 60
        workers: 1
        downstreams:
          plain: {provider: {latency: 0.1}}
          walled: {provider: {latency: 0.1}, client: {bulkhead: 2}}
          fused: {provider: {latency: 0.1}, client: {breaker: {failure_rate: 0.5}}}
        batches:
          - id: b
            kind: k
            count: 1
            program:
              - call: {downstream: plain, count: 1}
              - call: {downstream: walled, count: 1}
              - call: {downstream: fused, count: 1}
              - call: {downstream: walled, count: 1}
    """), "<test>")
    assert guarded(sc.batches[0].program, sc) == ("walled", "fused")
