"""Races on one row between actors with their own connections: the loser never overwrites.

Each actor gets its own store instance (its own connections, as a separate process would),
both are released by one barrier, and each race is run many times. Whatever the interleaving,
exactly one actor wins, its move is what the row holds, and the other is told it lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Completed, LostRace, Scheduler, SchedulerConfig, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from tests.store.backends import DURABLE

ROUNDS = 25


@pytest.fixture(params=sorted(DURABLE))
def pair(request, tmp_path):
    """Two store instances on one database."""
    with DURABLE[request.param](tmp_path) as first:
        if request.param == "sqlite":
            from taskfuse.store.sqlite import SQLiteStore

            second: Any = SQLiteStore(first.path)
        else:
            from taskfuse.store.postgres import PostgresStore
            from tests.store.backends import pg_url

            second = PostgresStore(pg_url(first.schema), pool_max=2)
        try:
            yield first, second
        finally:
            second.close()


def _sched(store: Any) -> Scheduler:
    return Scheduler(store, policy=RetryPolicy(max_retry=0),
                     config=SchedulerConfig(default_timeout=1.0))


def _race(a: Callable[[], Any], b: Callable[[], Any]) -> tuple[Any, Any]:
    barrier = threading.Barrier(2)
    out: list[Any] = [None, None]

    def run(i: int, fn: Callable[[], Any]) -> None:
        barrier.wait()
        out[i] = fn()

    threads = [threading.Thread(target=run, args=(0, a)), threading.Thread(target=run, args=(1, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out[0], out[1]


def test_cancel_against_complete(pair) -> None:
    one, two = map(_sched, pair)
    for i in range(ROUNDS):
        [task] = one.submit_many([TaskSpec("k", task_id=f"r{i}")], 0.0)
        work = one.claim("w", 0.0)
        assert isinstance(work, Work)
        claimed = work.tasks[0]
        canceled, completed = _race(
            partial(two.cancel, task.task_id, 0.5, "operator"),
            partial(one.complete, claimed, Outcome.success(1), 0.5),
        )
        final = one.store.get(task.task_id)
        if isinstance(completed, Completed):
            assert canceled is None and final.status is TaskStatus.SUCCESS and final.result == 1
        else:
            assert isinstance(completed, LostRace)
            assert canceled is not None and final.status is TaskStatus.CANCELED
            assert final.result is None


def test_watchdog_against_late_completion(pair) -> None:
    one, two = map(_sched, pair)
    for i in range(ROUNDS):
        one.submit_many([TaskSpec("k", task_id=f"late{i}", timeout=1.0)], 0.0)
        work = one.claim("w", 0.0)
        assert isinstance(work, Work)
        expired, completed = _race(
            partial(two.expire, 5.0), partial(one.complete, work.tasks[0], Outcome.success(1), 5.0)
        )
        final = one.store.get(f"late{i}")
        if isinstance(completed, Completed):
            assert expired == [] and final.status is TaskStatus.SUCCESS
        else:
            assert [t.status for t in expired] == [TaskStatus.TIMEOUT]
            assert final.status is TaskStatus.TIMEOUT and final.result is None


def test_two_claimers_of_one_row(pair) -> None:
    first, second = pair
    for i in range(ROUNDS):
        first.insert([Task(f"one{i}", "k", trace_id="t")])
        a, b = _race(lambda: first.claim("a", 1.0, 1), lambda: second.claim("b", 1.0, 1))
        assert len(a) + len(b) == 1, (a, b)
        winner = "a" if a else "b"
        stored = first.get(f"one{i}")
        assert stored.status is TaskStatus.RUNNING and stored.worker_id == winner
        assert stored.version == 1


def test_concurrent_batch_claimers_share_rows_without_overlap(pair) -> None:
    first, second = pair
    first.insert([Task(f"m{i}", "k", trace_id="t", priority=i % 3) for i in range(300)])
    got: dict[str, list[str]] = {"a": [], "b": []}

    def drain(store: Any, name: str) -> list[str]:
        while True:
            tasks = store.claim(name, 1.0, 7)
            if not tasks:
                return got[name]
            got[name] += [t.task_id for t in tasks]
            time.sleep(0.001)  # let the other claimer in between (SQLite serializes writers)

    _race(lambda: drain(first, "a"), lambda: drain(second, "b"))
    everything = got["a"] + got["b"]
    assert len(everything) == len(set(everything)) == 300
    assert got["a"] and got["b"]  # both really claimed


def test_a_capped_batch_holds_its_cap_across_claimers(pair) -> None:
    from taskfuse.core.task import Batch

    first, second = pair
    first.put_batch(Batch("capped", cap=3))
    first.insert([Task(f"c{i}", "k", trace_id="t", batch_id="capped") for i in range(20)])
    for _ in range(ROUNDS):
        a, b = _race(lambda: first.claim("a", 1.0, 2), lambda: second.claim("b", 1.0, 2))
        assert first.counts("capped")[TaskStatus.RUNNING] <= 3
        for task in a + b:  # finish them so the next round can claim again
            from taskfuse.core.states import TaskEvent
            from taskfuse.core.task import move

            assert first.swap(move(task, TaskEvent.SUCCEED, 2.0), task.version)


def test_two_submitters_of_one_idempotency_key(pair) -> None:
    first, second = pair
    for i in range(ROUNDS):
        key = f"order-{i}"
        mine = Task(f"a{i}", "k", trace_id="t", idempotency_key=key)
        theirs = Task(f"b{i}", "k", trace_id="t", idempotency_key=key)
        a, b = _race(partial(first.insert, [mine]), partial(second.insert, [theirs]))
        [(task_a, created_a)], [(task_b, created_b)] = a, b
        assert created_a != created_b  # exactly one submission created the task
        assert task_a.task_id == task_b.task_id  # and both answers name that one task
        assert len(first.find("t")) == i + 1
