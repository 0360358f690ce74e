"""The simulator's store forgets ended tasks but keeps what anyone reads of them."""

from __future__ import annotations

import random

from lab.scenario import load_scenario
from lab.simulate.run import run_scenario
from lab.simulate.sim import Simulation
from lab.simulate.simstore import LabStore, StoreMetrics
from taskfuse.core.metrics import MetricsAggregator
from taskfuse.core.scheduler import Idle, LostRace, Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec

from .conftest import SCENARIOS, simulate


def _scheduler(store: LabStore, sinks=()) -> Scheduler:
    return Scheduler(store, rng=random.Random(1), sinks=list(sinks))


def test_an_ended_task_is_forgotten_but_its_record_and_counts_stay() -> None:
    store = LabStore()
    sched = _scheduler(store)
    sched.submit_many([TaskSpec("k", task_id="a", timeout=5), TaskSpec("k", task_id="b")], 0.0)
    (a,) = sched.claim("w", 1.0).tasks
    sched.complete(a, Outcome.success(None), 2.0)
    assert store.get("a") is None and store.get("b") is not None
    assert sched.is_cancelled(a)  # an ended task reads as moved on
    assert isinstance(sched.complete(a, Outcome.success(None), 3.0), LostRace)
    assert store.counts()[TaskStatus.SUCCESS] == 1
    assert store.next_deadline() is None  # the stale deadline entry is dropped, not read
    assert sched.expire(100.0) == []
    (record,) = [r for r in store.records() if r.task_id == "a"]
    assert (record.status, record.started_at, record.finished_at) == (TaskStatus.SUCCESS, 1.0,
                                                                      2.0)
    assert [r.task_id for r in store.records()] == ["a", "b"]


def test_a_keyed_task_is_kept_so_a_duplicate_still_finds_it() -> None:
    store = LabStore()
    sched = _scheduler(store)
    sched.submit(TaskSpec("k", task_id="a", idempotency_key="key"), 0.0)
    (a,) = sched.claim("w", 0.0).tasks
    sched.complete(a, Outcome.success(None), 1.0)
    again = sched.submit(TaskSpec("k", task_id="a2", idempotency_key="key"), 2.0)
    assert (again.task_id, again.status) == ("a", TaskStatus.SUCCESS)
    assert len(store.records()) == 1


def test_children_of_a_failed_parent_are_canceled_and_forgotten() -> None:
    store = LabStore()
    sched = _scheduler(store)
    sched.submit_many([TaskSpec("p", task_id="p", max_retry=0),
                       TaskSpec("c", task_id="c1", depends_on=("p",)),
                       TaskSpec("c", task_id="c2", depends_on=("p",))], 0.0)
    (p,) = sched.claim("w", 0.0).tasks
    sched.complete(p, Outcome.failure("bad_params"), 1.0)
    assert {r.task_id: r.status for r in store.records()} == {
        "p": TaskStatus.FAILED, "c1": TaskStatus.CANCELED, "c2": TaskStatus.CANCELED}
    assert len(store) == 0 and store.dependents("p") == []
    assert isinstance(sched.claim("w", 2.0), Idle)


def test_find_scans_live_tasks_by_id_or_trace_id() -> None:
    store = LabStore()
    sched = _scheduler(store)
    (task,) = sched.submit_many([TaskSpec("k", task_id="x", trace_id="t" * 32)], 0.0)
    assert store.find("x") == [task] and store.find("t" * 32) == [task]
    assert store.find("nope") == []


def test_the_store_keeps_the_same_metrics_as_the_event_sink(tmp_path) -> None:
    """With a trace the scheduler emits every move: an aggregator fed from those events
    must agree with the metrics the store kept, at the end and at every sample."""
    events = MetricsAggregator()
    seen = []

    def sampled(sim) -> None:
        seen.append((dict(sim.metrics.counts), dict(events.counts)))

    sc = load_scenario(SCENARIOS / "retry-storm.yaml", ["batches.0.count=400"])
    sim = Simulation(sc, sinks=[events], on_sample=sampled)
    sim.run()
    assert isinstance(sim.metrics, StoreMetrics)
    assert sim.metrics.durations == events.durations
    assert {k: list(v) for k, v in sim.metrics.recent.items()} == {
        k: list(v) for k, v in events.recent.items()}
    assert all(ours == theirs for ours, theirs in seen) and len(seen) > 10
    assert run_scenario(sc).report == run_scenario(sc, trace=tmp_path / "t.trace").report


def test_a_dag_run_keeps_one_record_per_task() -> None:
    run = simulate("""
    workers: 2
    batches:
      - id: sku
        count: 5
        program: [{work: 0.1}]
        children: [{kind: image, count: 2, program: [{work: 0.1}]}]
    """)
    records = run.simulation.task_records()
    assert len(records) == 15 and len({r.task_id for r in records}) == 15
    assert all(r.status is TaskStatus.SUCCESS for r in records)
