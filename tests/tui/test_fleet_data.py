"""The data behind the fleet view: the stores' read-only questions (memory, SQLite and
PostgreSQL answer alike), workers summed per process, per-batch p99, a watched task's
history."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfuse.core.metrics import percentile
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.store.sql import WorkerActivity, p99_offset
from tests.store.backends import ALL_STORES
from tests.tui.fleetgen import NOW, PROCESSES, THREADS, fill_fleet
from tui.fleet import LIVE_S, P99Cache, Watched, live_threads, poll_store, worker_rows


@pytest.mark.parametrize("n", [1, 2, 99, 100, 101, 200, 1000])
def test_p99_offset_is_the_nearest_rank(n: int) -> None:
    values = list(range(n))
    assert sorted(values, reverse=True)[p99_offset(n)] == percentile(values, 99)


@pytest.mark.parametrize("name", list(ALL_STORES))
def test_every_store_answers_the_fleet_questions_alike(name: str, tmp_path: Path) -> None:
    with ALL_STORES[name](tmp_path) as store:
        facts = fill_fleet(store)
        activity = store.worker_activity()
        assert all(isinstance(a, WorkerActivity) for a in activity)
        threads = {a.worker_id for a in activity}
        assert threads == {f"{p}/{i}" for p in PROCESSES for i in range(THREADS)}
        assert store.batch_p99("nightly") == pytest.approx(facts.p99["nightly"])
        assert store.batch_p99("backfill") is None  # nothing ended
        assert store.batch_p99("no-such-batch") is None
        rows = {w.process: w for w in worker_rows(activity)}
        for p in PROCESSES:
            assert (rows[p].threads, rows[p].busy) == (THREADS, THREADS)
            assert rows[p].done == facts.done_by[p] and rows[p].errors == facts.errors_by[p]
            assert rows[p].heartbeat == NOW - 3
        sample = poll_store(store, NOW)
        assert [b.label for b in sample.batches] == ["PARTIAL_SUCCESS", "RUNNING", "PENDING"]


def test_live_threads_count_processes_active_within_a_minute() -> None:
    rows = worker_rows([
        WorkerActivity("a:1/0", "SUCCESS", 5, None, 90.0, 95.0, 0),
        WorkerActivity("a:1/1", "SUCCESS", 5, None, 90.0, 95.0, 0),
        WorkerActivity("b:2/0", "FAILED", 2, None, 10.0, 20.0, 2),
        WorkerActivity("c:3/0", "RUNNING", 1, 30.0, 30.0, None, 0),
    ])
    assert [r.process for r in rows] == ["c:3", "a:1", "b:2"]  # busiest, then latest
    now = 20.0 + LIVE_S + 1  # b stopped a minute ago; c still holds a task
    assert live_threads(rows, now) == 2 + 1
    assert rows[2].errors == 2 and rows[1].errors == 0
    assert live_threads(worker_rows([]), now) is None


def test_p99_is_asked_again_only_when_a_batch_ended_more_tasks() -> None:
    asked: list[str] = []

    class Store:
        def batch_p99(self, batch: str) -> float:
            asked.append(batch)
            return 1.5

    cache, store = P99Cache(), Store()
    assert cache.get(store, "b", 10, refresh=False) == 1.5  # first sight: asked at once
    assert cache.get(store, "b", 10, refresh=True) == 1.5
    assert cache.get(store, "b", 11, refresh=False) == 1.5  # moved, but a fast poll
    assert cache.get(store, "b", 11, refresh=True) == 1.5
    assert asked == ["b", "b"]
    assert cache.get(store, "empty", 0, refresh=True) is None


def test_a_watched_task_collects_the_changes_polls_see(tmp_path: Path) -> None:
    from taskfuse.store.memory import MemoryStore

    store = MemoryStore()
    sched = Scheduler(store)
    sched.submit_batch([TaskSpec("k", task_id="t1", max_retry=1)], 100.0, "b")
    watched = Watched("t1", store.find("t1"), 100.0)
    assert [h.what for h in watched.history("t1")] == ["submitted"]
    (task,) = sched.claim("h:1/0", 101.0, 1).tasks  # type: ignore[union-attr]
    assert watched.update(store.find("t1"), 102.0)
    sched.complete(task, Outcome(False, error_kind="http_503", error_msg="busy"), 103.0)
    assert watched.update(store.find("t1"), 104.0)
    assert not watched.update(store.find("t1"), 105.0)  # nothing moved
    seen = [(h.t, h.what) for h in watched.history("t1") if h.seen]
    assert seen[0] == (102.0, "PENDING -> RUNNING (version 1, attempt 1)")
    assert seen[1][0] == 104.0 and seen[1][1].startswith("RUNNING -> PENDING")
    assert "http_503" in seen[1][1]
