"""The Store contract, run against every store: memory, SQLite and PostgreSQL.

Each store must: dedupe on idempotency_key, refuse a stale compare-and-set without writing,
claim in priority / readiness / submission order, hold back not_before, unmet dependencies,
capped batches and blocked downstreams, and answer the watchdog's and sweeper's queries.
"""

from __future__ import annotations

import pytest

from taskfuse.core.states import TaskEvent, TaskStatus
from taskfuse.core.task import Batch, Task, move
from taskfuse.store.memory import StoreError
from tests.store.backends import memory_store, postgres_store, sqlite_store

STORES = {"memory": memory_store, "sqlite": sqlite_store, "postgres": postgres_store}


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    with STORES[request.param](tmp_path) as made:
        yield made


def T(task_id: str, **kw) -> Task:
    kw.setdefault("trace_id", f"tr-{task_id}")
    return Task(task_id=task_id, kind="k", **kw)


def test_insert_dedupes_on_idempotency_key(store) -> None:
    [(_, created)] = store.insert([T("a", idempotency_key="sku-1")])
    assert created
    [(again, created)] = store.insert([T("b", idempotency_key="sku-1")])
    assert not created and again.task_id == "a"
    assert store.get("b") is None
    assert store.counts()[TaskStatus.PENDING] == 1


def test_stale_swap_loses_and_writes_nothing(store) -> None:
    store.insert([T("a")])
    task = store.get("a")
    winner = move(task, TaskEvent.CANCEL, 1.0)
    loser = move(task, TaskEvent.CLAIM, 1.0, worker_id="w")
    assert store.swap(winner, task.version)
    assert not store.swap(loser, task.version)
    assert store.get("a").status is TaskStatus.CANCELED
    assert store.counts()[TaskStatus.RUNNING] == 0


def test_claim_order_priority_then_readiness_then_submission(store) -> None:
    store.insert([T("low", priority=0, created_at=0), T("high", priority=5, created_at=2),
                  T("mid1", priority=1, created_at=1), T("mid0", priority=1, created_at=1)])
    got = [t.task_id for t in store.claim("w", 3.0, 10)]
    assert got == ["high", "mid1", "mid0", "low"]
    assert all(t.status is TaskStatus.RUNNING for t in map(store.get, got))


def test_claim_holds_back_not_before_and_reports_it(store) -> None:
    store.insert([T("later", not_before=10.0)])
    assert store.claim("w", 5.0, 1) == []
    assert store.next_ready_at(5.0) == 10.0
    assert [t.task_id for t in store.claim("w", 10.0, 1)] == ["later"]


def test_claim_waits_for_dependencies(store) -> None:
    store.insert([T("up"), T("down", depends_on=("up",))])
    [up] = store.claim("w", 1.0, 5)
    assert up.task_id == "up"
    assert store.claim("w", 1.0, 5) == []
    assert store.swap(move(up, TaskEvent.SUCCEED, 2.0), up.version)
    assert [t.task_id for t in store.claim("w", 3.0, 5)] == ["down"]


def test_claim_respects_batch_cap_and_blocked_downstreams(store) -> None:
    store.put_batch(Batch("b", cap=1))
    store.insert([T("b1", batch_id="b"), T("b2", batch_id="b"),
                  T("api", downstreams=("partner",))])
    first = store.claim("w", 1.0, 5, frozenset({"partner"}))
    assert [t.task_id for t in first] == ["b1"]
    assert [t.task_id for t in store.claim("w", 1.0, 5)] == ["api"]


def test_watchdog_and_sweeper_queries(store) -> None:
    store.insert([T("a", timeout=2.0), T("b", timeout=100.0)])
    assert len(store.claim("w", 0.0, 2)) == 2
    assert store.next_deadline() == 2.0
    assert [t.task_id for t in store.overdue(2.5)] == ["a"]
    assert [t.task_id for t in store.overdue(2.5)] == ["a"]  # a query: asking twice is fine
    b = store.get("b")
    assert store.heartbeat("b", b.version, 50.0)
    assert not store.heartbeat("b", b.version - 1, 50.0)  # not the attempt that holds it
    stale = lambda now, lease: sorted(t.task_id for t in store.stale_running(now, lease))  # noqa: E731
    assert stale(52.0, 5.0) == ["a"]  # a: older than 2 x timeout; b: renewed its lease at 50
    assert stale(60.0, 5.0) == ["a", "b"]  # b's lease lapsed
    assert stale(60.0, None) == ["a"]  # without leases only the 2 x timeout rule applies


def test_find_by_trace_and_counts_by_batch(store) -> None:
    store.put_batch(Batch("b"))
    store.insert([T("a", batch_id="b", trace_id="trace-x"), T("c", trace_id="trace-x")])
    assert {t.task_id for t in store.find("trace-x")} == {"a", "c"}
    assert [t.task_id for t in store.find("a")] == ["a"]
    assert store.counts("b")[TaskStatus.PENDING] == 1
    assert [t.task_id for t in store.batch_tasks("b")] == ["a"]
    assert [t.task_id for t in store.waiting_since_before(1.0)] in (["a", "c"], ["c", "a"])


def test_requeued_task_queues_behind_peers_ready_at_the_same_time(store) -> None:
    store.insert([T("a"), T("b"), T("c")])
    [a] = store.claim("w", 1.0, 1)
    assert store.swap(move(a, TaskEvent.RELEASE, 1.0), a.version)  # back to PENDING
    assert [t.task_id for t in store.claim("w", 1.0, 3)] == ["b", "c", "a"]


def test_batch_claim_fills_a_capped_batch_and_goes_on_to_others(store) -> None:
    store.put_batch(Batch("capped", cap=2))
    store.insert([T(f"c{i}", batch_id="capped", priority=1) for i in range(4)]
                 + [T("free1"), T("free2")])
    got = [t.task_id for t in store.claim("w", 1.0, 10)]
    assert got == ["c0", "c1", "free1", "free2"]
    assert store.counts("capped")[TaskStatus.RUNNING] == 2
    assert store.claim("w", 1.0, 10) == []


def test_released_dependents_queue_in_submission_order(store) -> None:
    store.insert([T("up"), T("d1", depends_on=("up",)), T("other"),
                  T("d2", depends_on=("up", "up"))])
    [up] = store.claim("w", 1.0, 1)
    assert store.swap(move(up, TaskEvent.SUCCEED, 2.0), up.version)
    assert [t.task_id for t in store.claim("w", 3.0, 5)] == ["other", "d1", "d2"]
    assert [t.task_id for t in store.dependents("up")] == ["d1", "d2", "d2"]


def test_heartbeat_renews_the_lease_without_a_new_version(store) -> None:
    store.insert([T("a", timeout=10.0)])
    [a] = store.claim("w", 0.0, 1)
    assert store.heartbeat("a", a.version, 4.0)
    renewed = store.get("a")
    assert renewed.version == a.version and renewed.heartbeat_at == 4.0
    assert store.stale_running(8.0, 5.0) == []
    assert [t.task_id for t in store.stale_running(9.5, 5.0)] == ["a"]
    assert store.swap(move(renewed, TaskEvent.SUCCEED, 5.0), a.version)  # same version
    assert not store.heartbeat("a", a.version, 6.0)  # no longer RUNNING
    assert not store.heartbeat("a", a.version + 1, 6.0)  # the finished record's own version


def test_a_stale_attempt_renews_nothing_even_on_the_same_worker(store) -> None:
    """Attempt 1 timed out and was retried; the same worker claimed attempt 2. Only the
    version names the attempt: attempt 1's heartbeat is refused and changes no field."""
    store.insert([T("a", timeout=10.0)])
    [first] = store.claim("w", 0.0, 1)
    retry = move(first, TaskEvent.TIMEOUT_RETRY, 11.0, not_before=11.0)
    assert store.swap(retry, first.version)
    [second] = store.claim("w", 12.0, 1)
    assert second.worker_id == first.worker_id == "w"
    assert not store.heartbeat("a", first.version, 13.0)
    assert store.get("a") == second  # heartbeat_at still the claim's, nothing else changed
    assert [t.task_id for t in store.stale_running(18.5, 6.0)] == ["a"]  # its lease: lapsed
    assert store.heartbeat("a", second.version, 14.0)
    assert store.get("a").heartbeat_at == 14.0
    assert store.stale_running(18.5, 6.0) == []
    assert not store.swap(move(first, TaskEvent.SUCCEED, 15.0), first.version)
    assert store.get("a").status is TaskStatus.RUNNING


def test_payload_and_result_round_trip(store) -> None:
    payload = {"sku": "A-1", "qty": 3, "tags": ["x", "y"], "price": 9.5, "ok": True, "n": None}
    store.insert([T("a", payload=payload)])
    [a] = store.claim("w", 1.0, 1)
    assert a.payload == payload
    assert store.swap(move(a, TaskEvent.SUCCEED, 2.0, result={"rows": [1, 2]}), a.version)
    assert store.get("a").result == {"rows": [1, 2]}
    assert store.get("a").payload == payload


def test_insert_is_all_or_nothing_on_a_clashing_task_id(store) -> None:
    store.insert([T("a")])
    with pytest.raises(StoreError, match="'a'"):
        store.insert([T("new"), T("a")])
    assert store.get("new") is None
    assert sum(store.counts().values()) == 1


# -- what a throughput-minded driver asks: groups, exclusions, cheap questions ---------------


def test_claim_skips_excluded_tasks_and_leaves_them_ready(store) -> None:
    store.insert([T("a", created_at=0), T("b", created_at=1), T("c", created_at=2)])
    got = [t.task_id for t in store.claim("w", 3.0, 2, exclude=frozenset({"a"}))]
    assert got == ["b", "c"]
    assert [t.task_id for t in store.claim("w", 3.0, 5)] == ["a"]  # still ready, in order


def test_swap_many_lets_each_move_win_or_lose_on_its_own(store) -> None:
    store.insert([T("a"), T("b"), T("c")])
    a, b, c = store.claim("w", 1.0, 3)
    assert store.swap(move(b, TaskEvent.CANCEL, 1.5), b.version)  # b moved on meanwhile
    won = store.swap_many([(move(t, TaskEvent.SUCCEED, 2.0), t.version) for t in (a, b, c)])
    assert won == [True, False, True]
    assert [store.get(i).status for i in "abc"] == [TaskStatus.SUCCESS, TaskStatus.CANCELED,
                                                   TaskStatus.SUCCESS]


def test_heartbeat_many_renews_only_current_attempts(store) -> None:
    store.insert([T("a"), T("b")])
    a, b = store.claim("w", 1.0, 2)
    retried = move(b, TaskEvent.RETRY, 1.5)  # b's attempt ended; its record moved on
    assert store.swap(retried, b.version)
    assert store.heartbeat_many([(a.task_id, a.version), (b.task_id, b.version)], 5.0) == [
        True, False]
    assert store.get("a").heartbeat_at == 5.0 and store.get("a").version == a.version
    assert store.heartbeat_many([(a.task_id, a.version + 1)], 6.0) == [False]  # no such one


def test_has_unfinished_answers_per_batch_and_overall(store) -> None:
    assert not store.has_unfinished()
    store.put_batch(Batch("b1"))
    store.insert([T("a", batch_id="b1"), T("x")])
    assert store.has_unfinished() and store.has_unfinished("b1")
    assert not store.has_unfinished("b2")
    for task in store.claim("w", 1.0, 5):
        store.swap(move(task, TaskEvent.SUCCEED, 2.0), task.version)
    assert not store.has_unfinished() and not store.has_unfinished("b1")


def test_heartbeat_many_tells_two_attempts_of_one_task_apart(store) -> None:
    store.insert([T("a")])
    [first] = store.claim("w", 1.0, 1)
    assert store.swap(move(first, TaskEvent.RETRY, 1.5), first.version)
    [second] = store.claim("w", 2.0, 1)  # the retry, on the same worker
    assert second.task_id == first.task_id and second.version > first.version
    got = store.heartbeat_many([(first.task_id, first.version),
                                (second.task_id, second.version)], 3.0)
    assert got == [False, True]


def test_a_workers_beat_replaces_its_last_and_reads_back_latest_first(store) -> None:
    from taskfuse.core.storeapi import WorkerBeat

    def beat(worker: str, at: float, stuck: int = 0) -> WorkerBeat:
        return WorkerBeat(worker, "app", 4, 3, stuck, {"sync": stuck} if stuck else {},
                          10, 9, 1, 1.0, at)

    assert store.workers() == []
    store.beat_worker(beat("h:1", 5.0))
    store.beat_worker(beat("h:2", 6.0))
    store.beat_worker(beat("h:1", 7.0, stuck=2))  # the same worker: replaced, not added
    assert store.workers() == [beat("h:1", 7.0, stuck=2), beat("h:2", 6.0)]


# -- the sweeper's questions: how long a task has waited, attempts beyond the limit ----------


def test_pending_since_is_stored_and_waiting_counts_from_it(store) -> None:
    store.insert([T("old", created_at=0.0, pending_since=0.0), T("bare", created_at=0.0),
                  T("later", created_at=0.0, pending_since=0.0, not_before=100.0),
                  T("back", created_at=0.0, pending_since=0.0)])
    [back] = store.claim("w", 1.0, 1, exclude=frozenset({"old", "bare"}))
    assert back.task_id == "back" and back.pending_since == 0.0  # a claim keeps it
    assert store.swap(move(back, TaskEvent.RELEASE, 50.0), back.version)
    assert store.get("back").pending_since == 50.0
    assert store.get("bare").pending_since is None  # a record built without it: created_at
    waiting = lambda cutoff: sorted(t.task_id for t in store.waiting_since_before(cutoff))  # noqa: E731
    assert waiting(40.0) == ["bare", "old"]  # back waits since 50, later until its not_before
    assert waiting(60.0) == ["back", "bare", "old"]
    assert waiting(100.5) == ["back", "bare", "later", "old"]
    assert waiting(40.0) == ["bare", "old"]  # a query: asking again is fine


def test_running_over_limit_names_only_attempts_beyond_max_retry(store) -> None:
    store.insert([T("over", retry_count=2, max_retry=1), T("last", retry_count=1, max_retry=1),
                  T("waiting", retry_count=5, max_retry=1, depends_on=("last",))])
    assert store.running_over_limit() == []  # PENDING rows are not asked about
    assert len(store.claim("w", 1.0, 5)) == 2
    assert [t.task_id for t in store.running_over_limit()] == ["over"]
