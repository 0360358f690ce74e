"""Tasks that ignore cancellation: stuck threads, their replacement bound, killed processes,
and the claim that keeps a retry from overlapping its stuck attempt."""

from __future__ import annotations

import contextlib
import io
import json
import random

import numpy as np

from lab.cli import main
from taskfuse.core.scheduler import Idle, Scheduler, Work
from taskfuse.core.task import TaskSpec
from taskfuse.store.memory import MemoryStore
from taskfuse.trace import read_trace

from .conftest import SCENARIOS, simulate

HUNG = """
name: hung
workers: {workers}
stuck_threads_max: {bound}
task_timeout_s: 1
watchdog_interval_s: 5
retry: {{max_retry: {retries}, backoff: {{kind: none}}}}
kinds:
  sync: {{executor: {executor}, overlap: {overlap}}}
process_respawn_s: 0.25
batches:
  - id: hung
    kind: sync
    count: {hung}
    program:
      - hang: {{probability: 1.0, duration: 10}}
  - id: ok
    kind: sync
    count: {ok}
    arrival: {{kind: closed, start_s: 0.5}}
    program:
      - work: 1
"""


def run(tmp_path=None, workers=2, bound=2, retries=0, executor="thread", overlap="false",
        hung=1, ok=0):
    text = HUNG.format(workers=workers, bound=bound, retries=retries, executor=executor,
                       overlap=overlap, hung=hung, ok=ok)
    return simulate(text, trace=None if tmp_path is None else tmp_path / "h.trace")


def test_claim_skips_excluded_tasks_and_leaves_them_ready() -> None:
    sched = Scheduler(MemoryStore(), rng=random.Random(1))
    sched.submit_many([TaskSpec("k", task_id=t) for t in ("a", "b", "c")], 0.0)
    first = sched.claim("w", 1.0, 2, exclude={"a"})
    assert isinstance(first, Work) and [t.task_id for t in first.tasks] == ["b", "c"]
    assert isinstance(sched.claim("w", 1.0, 1, exclude={"a"}), Idle)
    again = sched.claim("w", 2.0)
    assert isinstance(again, Work) and [t.task_id for t in again.tasks] == ["a"]


def test_a_hung_thread_is_timed_out_but_stays_stuck_and_is_replaced(tmp_path) -> None:
    result = run(tmp_path, ok=4)
    r = result.report
    assert r["tasks"]["TIMEOUT"] == 1 and r["tasks"]["SUCCESS"] == 4
    assert r["stuck_workers"]["peak"] == 1 and r["stuck_workers"]["replaced"] == 1
    # w2 runs ok tasks from 0.5 and 1.5; the replacement starts at the timeout (1.002) and
    # runs two: the last ends at 3.002
    assert r["makespan_s"] == 3.002
    tr = read_trace(tmp_path / "h.trace")
    t, stuck = tr.series("stuck")
    assert stuck.max() == 1 and stuck[t >= 1.5].max() == 1
    _, limit = tr.series("running_limit")
    assert limit.max() == 2  # the pool stays at its target while one thread is stuck
    # the mean: stuck from the timeout (1.002 s) to the end (2.5 s), over the 2.5 s run
    assert 0.5 < r["stuck_workers"]["mean"] < 0.7


def test_stuck_count_is_exact_and_replacements_stop_at_the_bound() -> None:
    r = run(workers=2, bound=3, hung=5, ok=0).report
    # 2 workers hang; at their timeout 2 replacements start and hang too; at theirs, one
    # more (3 = the bound) and no fourth: 5 stuck, none left to claim
    assert r["stuck_workers"]["peak"] == 5
    assert r["stuck_workers"]["replaced"] == 3
    assert r["tasks"]["TIMEOUT"] == 5 and r["makespan_s"] == 3.006


def test_past_the_bound_the_pool_shrinks_until_a_thread_returns() -> None:
    r = run(workers=2, bound=0, hung=2, ok=2).report
    assert r["stuck_workers"]["replaced"] == 0
    assert r["stuck_workers"]["peak"] == 2
    assert r["makespan_s"] == 11.0  # the ok tasks wait for the hung threads (10 s) + 1 s


def test_a_returned_stuck_thread_retires_when_the_pool_is_full() -> None:
    run_ = run(workers=2, bound=2, hung=1, ok=30)
    r = run_.report
    assert r["stuck_workers"]["replaced"] == 1 and r["stuck_workers"]["retired"] == 1
    sim = run_.simulation
    assert len(sim.workers) - len(sim.dead) == 2


def test_a_retry_waits_for_its_stuck_attempt_unless_the_kind_allows_overlap() -> None:
    waits = run(retries=1).simulation.task_records()
    (waited,) = waits
    assert waited.started_at >= 10.0  # the retry started when the hang ended
    overlapped = run(retries=1, overlap="true").report
    assert overlapped["stuck_workers"]["peak"] == 2  # both attempts hung, side by side


def test_a_process_is_killed_at_the_timeout_and_its_worker_respawns() -> None:
    result = run(workers=1, bound=1, executor="process", hung=1, ok=1)
    r = result.report
    assert r["workers_killed"] == 1 and r["stuck_workers"]["peak"] == 0
    assert r["tasks"]["TIMEOUT"] == 1 and r["tasks"]["SUCCESS"] == 1
    # killed at 1 s + the watchdog's 2 ms slack, back 0.25 s later, then 1 s of work
    assert r["makespan_s"] == 2.252


def test_the_shipped_scenario_keeps_its_slo_only_with_processes() -> None:
    def simulate_json(*extra: str) -> tuple[int, dict]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["simulate", str(SCENARIOS / "hung-tasks.yaml"), "--json",
                         "--no-trace", *extra])
        return code, json.loads(out.getvalue())

    code, threads = simulate_json()
    assert code == 1 and not threads["slo"]["ok"]
    code, processes = simulate_json("--set", "kinds.sync.executor=process")
    assert code == 0 and processes["slo"]["ok"]
    assert threads["stuck_workers"]["peak"] > 3 and processes["stuck_workers"]["peak"] == 0
    assert threads["makespan_s"] > 1.5 * processes["makespan_s"]
    assert np.isclose(processes["workers_killed"], threads["late_results_discarded"])
