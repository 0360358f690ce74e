"""An operator's retry through the core, on the in-memory store: the plan and its writes."""

from __future__ import annotations

import pytest

from taskfuse.core import reopen
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.states import TaskEvent, TaskfuseError, TaskStatus
from taskfuse.core.task import Outcome, TaskSpec, move
from taskfuse.store.memory import MemoryStore

S = TaskStatus


def _failed_dag() -> Scheduler:
    """a FAILED; b depends on a, c on b (both CANCELED for it); d on a and on x, which an
    operator canceled on its own; e on d; ok SUCCESS."""
    sched = Scheduler(MemoryStore(), policy=RetryPolicy(max_retry=0))
    sched.submit_many([TaskSpec("k", task_id=t) for t in ("a", "x", "ok")], 0.0)
    sched.cancel("x", 0.5)
    sched.submit_many([TaskSpec("k", task_id="b", depends_on=("a",)),
                       TaskSpec("k", task_id="c", depends_on=("b",)),
                       TaskSpec("k", task_id="d", depends_on=("a", "x")),
                       TaskSpec("k", task_id="e", depends_on=("d",))], 1.0)
    work = sched.claim("w", 2.0, 2)
    assert isinstance(work, Work)
    for task in work.tasks:
        outcome = Outcome.success() if task.task_id == "ok" else Outcome.failure("bad_params")
        sched.complete(task, outcome, 3.0)
    return sched


def test_plan_brings_back_dependents_deepest_first_and_only_unblocked_ones() -> None:
    sched = _failed_dag()
    store = sched.store
    assert [store.get(t).status for t in "abcde"] == [S.FAILED] + [S.CANCELED] * 4
    plan = reopen.plan(store, [store.get("a")])
    assert [t.task_id for t in plan.tasks] == ["c", "b", "a"]  # d, e wait for x, still ended
    assert plan.dependents == {"b", "c"}


def test_retry_reopens_counts_and_a_second_retry_is_a_no_op() -> None:
    sched = _failed_dag()
    store = sched.store
    result = reopen.retry(store, "a", 10.0, dry_run=True)
    assert len(result.plan.tasks) == 3 and not result.retried
    assert store.get("a").status is S.FAILED  # a dry run writes nothing
    result = reopen.retry(store, "a", 10.0, emit=sched.emit)
    assert [t.task_id for t in result.retried] == ["c", "b", "a"]
    assert {t: store.get(t).status for t in "abc"} == dict.fromkeys("abc", S.PENDING)
    assert store.get("a").operator_retried_at == 10.0
    assert store.counts()[S.PENDING] == 3
    assert not reopen.retry(store, "a", 11.0).plan.tasks
    work = sched.claim("w", 12.0, 10)  # only a is ready: b waits for it
    assert [t.task_id for t in work.tasks] == ["a"]
    sched.complete(work.tasks[0], Outcome.failure("bad_params"), 13.0)
    assert {t: store.get(t).status for t in "abc"} == {"a": S.FAILED, "b": S.CANCELED,
                                                       "c": S.CANCELED}


def test_reset_attempts_and_a_lost_race_is_skipped() -> None:
    sched = _failed_dag()
    store = sched.store
    plan = reopen.plan(store, [store.get("a")])
    first = reopen.reopen(store, plan, 5.0, reset_attempts=True, chunk=1)
    assert store.get("a").retry_count == 0 and len(first.retried) == 3
    late = reopen.reopen(store, plan, 6.0)  # the same plan again: every version moved on
    assert late.retried == () and late.skipped == ("c", "b", "a")


def test_batch_selection_and_refusals() -> None:
    sched = Scheduler(MemoryStore(), policy=RetryPolicy(max_retry=0))
    sched.submit_batch([TaskSpec("k", task_id=f"t{i}") for i in range(3)], 0.0, "b")
    sched.cancel("t0", 1.0)
    assert [t.task_id for t in reopen.select(sched.store, "b", [S.CANCELED])] == ["t0"]
    assert reopen.select(sched.store, "b", [S.FAILED]) == []
    with pytest.raises(reopen.RetryRefused, match="no task or batch with id 'nope'"):
        reopen.select(sched.store, "nope", [S.FAILED])
    with pytest.raises(TaskfuseError, match="'SUCCESS' cannot be retried"):
        reopen.parse_statuses("failed,success")
    with pytest.raises(reopen.RetryRefused):
        reopen.retry(sched.store, "b", 2.0, statuses=[S.PENDING])
    assert move(sched.store.get("t0"), TaskEvent.OPERATOR_RETRY, 3.0).operator_retries == 1


def test_a_task_whose_upstream_stays_ended_is_held_back() -> None:
    sched = _failed_dag()
    store = sched.store
    plan = reopen.plan(store, [store.get("b"), store.get("d")])  # a and x stay ended
    assert plan.tasks == () and plan.held == ("b", "d")
    plan = reopen.plan(store, [store.get("b"), store.get("a")])
    assert [t.task_id for t in plan.tasks] == ["c", "b", "a"] and plan.held == ()
