"""The sweeper's three rules (`Scheduler.sweep`), end to end on every store.

1. orphans: a lapsed lease or 2 x timeout -> back to PENDING when attempts remain, else FAILED;
2. waited too long: PENDING longer than the max age, counted from when the task last became
   PENDING (or its not_before, if later) -> CANCELED; never what was just requeued;
3. beyond its attempts: RUNNING with retry_count above max_retry -> FAILED at once; the last
   attempt (retry_count == max_retry) is legitimate and only rule 1 ends it.
"""

from __future__ import annotations

import random

import pytest

from taskfuse.core.retry import Backoff, Jitter, RetryPolicy
from taskfuse.core.scheduler import (
    ATTEMPTS_EXCEEDED,
    Completed,
    Scheduler,
    SchedulerConfig,
    Work,
)
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from tests.store.backends import ALL_STORES

MAX_AGE = 30.0
LEASE = 5.0
TIMEOUT = 10.0
P, R = TaskStatus.PENDING, TaskStatus.RUNNING


@pytest.fixture(params=sorted(ALL_STORES))
def store(request, tmp_path):
    with ALL_STORES[request.param](tmp_path) as made:
        yield made


def scheduler(store) -> Scheduler:
    policy = RetryPolicy(max_retry=2, backoff=Backoff(base=4.0, cap=4.0, jitter=Jitter.NONE))
    return Scheduler(store, policy=policy, rng=random.Random(7),
                     config=SchedulerConfig(default_timeout=TIMEOUT, lease_s=LEASE,
                                            max_pending_age_s=MAX_AGE))


def claim_one(sched: Scheduler, now: float) -> Task:
    answer = sched.claim("w", now)
    assert isinstance(answer, Work), answer
    [task] = answer.tasks
    return task


def status(sched: Scheduler, task_id: str) -> TaskStatus:
    return sched.store.get(task_id).status


def test_a_sweep_never_cancels_what_it_just_requeued(store) -> None:
    """The reported bug: created at 0, orphaned at 100 (its worker died), the max age 30. The
    pass that puts it back to PENDING used to cancel it in the same breath."""
    sched = scheduler(store)
    task = sched.submit(TaskSpec("k"), 0.0)
    assert task.pending_since == 0.0
    claim_one(sched, 0.0)
    [moved] = sched.sweep(100.0)
    assert (moved.status, moved.retry_count, moved.pending_since) == (P, 1, 100.0)
    assert status(sched, task.task_id) is P
    assert sched.sweep(100.0 + MAX_AGE) == []  # waited exactly the max age: not longer
    [expired] = sched.sweep(100.5 + MAX_AGE)
    assert expired.status is TaskStatus.CANCELED and expired.error_kind == "expired"


def _released(sched: Scheduler, task: Task, now: float) -> None:
    assert sched.release(task, now) is not None


def _retried(sched: Scheduler, task: Task, now: float) -> None:
    answer = sched.complete(task, Outcome.failure("http_503", "busy"), now)
    assert isinstance(answer, Completed) and answer.task.not_before == now + 4.0


def _deferred(sched: Scheduler, task: Task, now: float) -> None:
    answer = sched.complete(task, Outcome.failure("breaker_open", "open"), now)
    assert isinstance(answer, Completed) and answer.task.retry_count == 0


def _timed_out(sched: Scheduler, task: Task, now: float) -> None:
    [moved] = sched.expire(now)
    assert moved.status is P and moved.retry_count == 1


def _orphaned(sched: Scheduler, task: Task, now: float) -> None:
    [moved] = sched.sweep(now)
    assert moved.status is P and moved.error_kind == "orphaned"


@pytest.mark.parametrize("requeue", [_released, _retried, _deferred, _timed_out, _orphaned],
                         ids=["released", "retried", "deferred", "timed_out", "orphaned"])
def test_every_way_back_to_pending_starts_the_wait_anew(store, requeue) -> None:
    """Released at shutdown, retried after a backoff, deferred by a breaker, retried after a
    timeout, requeued by the sweeper: each waits the whole max age from its move (or from
    its not_before, when the move set a later one), whatever its created_at."""
    sched = scheduler(store)
    task = sched.submit(TaskSpec("k"), 0.0)
    claimed = claim_one(sched, 0.0)
    requeue(sched, claimed, 100.0)
    waiting = sched.store.get(task.task_id)
    assert waiting.status is P and waiting.pending_since == 100.0
    since = waiting.waiting_since
    assert since == max(100.0, waiting.not_before or 0.0)
    assert sched.sweep(since + MAX_AGE) == []
    assert status(sched, task.task_id) is P
    [expired] = sched.sweep(since + MAX_AGE + 0.5)
    assert expired.task_id == task.task_id and expired.status is TaskStatus.CANCELED


def test_a_task_held_back_until_later_is_not_waiting_yet(store) -> None:
    sched = scheduler(store)
    task = sched.submit(TaskSpec("k", not_before=500.0), 0.0)
    assert sched.sweep(100.0) == [] and sched.sweep(500.0 + MAX_AGE) == []
    assert status(sched, task.task_id) is P
    [expired] = sched.sweep(501.0 + MAX_AGE)
    assert expired.status is TaskStatus.CANCELED


def test_an_attempt_beyond_max_retry_is_ended_at_once_even_with_a_live_lease(store) -> None:
    """An impossible record (an operator lowered max_retry, or a bug): attempt 4 of a task
    allowed 2 is ended by the next pass, however fresh its lease."""
    sched = scheduler(store)
    sched.store.insert([Task("over", "k", trace_id="tr", retry_count=3, max_retry=1,
                             timeout=TIMEOUT, created_at=0.0, pending_since=0.0)])
    over = claim_one(sched, 1.0)
    assert sched.heartbeat(over, 2.0)
    [ended] = sched.sweep(2.0)
    assert (ended.status, ended.error_kind) == (TaskStatus.FAILED, ATTEMPTS_EXCEEDED)
    assert ended.error_msg == "attempt 4 RUNNING but max_retry 1 allows 2"
    assert sched.is_cancelled(over) and not sched.heartbeat(over, 3.0)  # its worker stops


def _last_attempt(sched: Scheduler) -> Task:
    """A task with max_retry 1 on its second (last) attempt, claimed at 20."""
    task = sched.submit(TaskSpec("k", max_retry=1), 0.0)
    first = claim_one(sched, 0.0)
    assert isinstance(sched.complete(first, Outcome.failure("http_503", "busy"), 1.0), Completed)
    last = claim_one(sched, 20.0)
    assert last.task_id == task.task_id and last.retry_count == last.max_retry == 1
    return last


def test_a_healthy_last_attempt_is_left_alone(store) -> None:
    sched = scheduler(store)
    last = _last_attempt(sched)
    for now in (23.0, 27.0, 31.0, 35.0, 39.0):  # heartbeats within the lease, under 2 x timeout
        assert sched.heartbeat(last, now)
        assert sched.sweep(now + 0.5) == []
    assert status(sched, last.task_id) is R


def test_a_last_attempt_past_twice_its_timeout_fails_lease_or_not(store) -> None:
    sched = scheduler(store)
    last = _last_attempt(sched)
    assert sched.heartbeat(last, 40.0)  # its lease is alive, but it has hung for 2 x timeout
    [ended] = sched.sweep(40.5)
    assert (ended.status, ended.error_kind) == (TaskStatus.FAILED, "orphaned")
    assert ended.retry_count == 1  # ended, not retried: no attempt remains


def test_a_last_attempt_whose_worker_died_fails(store) -> None:
    sched = scheduler(store)
    last = _last_attempt(sched)
    assert sched.sweep(20.0 + LEASE) == []  # the lease ends after LEASE, not at it
    [ended] = sched.sweep(20.5 + LEASE)
    assert ended.task_id == last.task_id
    assert (ended.status, ended.error_kind) == (TaskStatus.FAILED, "orphaned")
