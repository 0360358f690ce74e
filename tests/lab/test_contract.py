"""The simulator keeps the whole driver contract, as the threaded runtime does: workers
renew the leases of the tasks they run, and the watchdog looks at the core's next deadline."""

from __future__ import annotations

from .conftest import simulate

LEASE = """
name: lease
workers: 4
task_timeout_s: 60
sweeper: {interval_s: 1, lease_s: 3}
batches:
  - id: long
    count: 8
    program:
      - work: 10
"""


def test_tasks_longer_than_the_lease_finish_because_workers_renew_it() -> None:
    result = simulate(LEASE)
    outcomes = result.report["tasks"]
    assert outcomes["SUCCESS"] == 8 and outcomes["FAILED"] == 0
    assert result.report["retries"] == 0
    assert result.report["makespan_s"] == 20.0


def test_a_crashed_workers_tasks_come_back_after_the_lease() -> None:
    """Its attempts stop being renewed; the sweeper finds the lapsed lease and retries."""
    result = simulate(LEASE + "faults: [{kind: worker_crash, at_s: 2, workers: 1}]\n")
    assert result.report["workers_crashed"] == 1
    outcomes = result.report["tasks"]
    assert outcomes["SUCCESS"] == 8
    assert result.report["retries"] == 1  # the orphan, retried once
    # the lease lapses 3 s after the last renewal (t=1), the sweeper looks every second
    assert 24.0 <= result.report["makespan_s"] <= 30.0


def test_the_watchdog_times_out_at_the_deadline_not_at_its_next_tick() -> None:
    result = simulate("""
        name: deadline
        workers: 1
        watchdog_interval_s: 5
        retry: {max_retry: 0}
        batches:
          - id: slow
            count: 1
            timeout_s: 0.3
            program:
              - work: 2
        """, trace=None)
    assert result.report["tasks"]["TIMEOUT"] == 1
    assert result.report["makespan_s"] < 0.31  # 0.3 s + the 2 ms slack, not the 5 s tick
