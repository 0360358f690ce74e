"""The data behind the fleet view: the stores' read-only questions (memory, SQLite and
PostgreSQL answer alike), workers summed per process, per-batch p99, a watched task's
history."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskfuse.core.metrics import percentile
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.store.sql import p99_offset
from tests.store.backends import ALL_STORES
from tests.tui.fleetgen import NOW, PROCESSES, THREADS, fill_fleet
from tui.fleet import (
    LIVE_S,
    BatchMemory,
    P99Cache,
    RunningTask,
    Watched,
    live_threads,
    poll_store,
    worker_rows,
)


@pytest.mark.parametrize("n", [1, 2, 99, 100, 101, 200, 1000])
def test_p99_offset_is_the_nearest_rank(n: int) -> None:
    values = list(range(n))
    assert sorted(values, reverse=True)[p99_offset(n)] == percentile(values, 99)


@pytest.mark.parametrize("name", list(ALL_STORES))
def test_every_store_answers_the_fleet_questions_alike(name: str, tmp_path: Path) -> None:
    with ALL_STORES[name](tmp_path) as store:
        facts = fill_fleet(store)
        assert store.batch_p99("nightly") == pytest.approx(facts.p99["nightly"])
        assert store.batch_p99("backfill") is None  # nothing ended
        assert store.batch_p99("no-such-batch") is None
        sample = poll_store(store, NOW)
        assert [b.label for b in sample.batches] == ["PARTIAL_SUCCESS", "RUNNING", "PENDING"]
        kept = store.batch_counts()  # every batch in one query, as status asks them one each
        assert list(kept) == store.batch_ids()
        assert kept == {b: store.counts(b) for b in store.batch_ids()}
        rows = {w.process: w for w in sample.workers or ()}
        assert set(rows) == set(PROCESSES)
        for p in PROCESSES:
            assert (rows[p].threads, rows[p].busy) == (THREADS, THREADS)
            assert rows[p].done == facts.done_by[p] and rows[p].errors == facts.errors_by[p]
            assert rows[p].heartbeat == NOW - 3


def _running(worker_id: str, started_at: float, heartbeat_at: float | None = None
             ) -> RunningTask:
    return RunningTask(f"t-{worker_id}-{started_at}", "k", None, "tr", worker_id, started_at,
                       1, heartbeat_at)


def _beat(process: str, at: float, threads: int = 2, busy: int = 0, completed: int = 0,
          failed: int = 0, stopped: bool = False) -> WorkerBeat:
    return WorkerBeat(process, "app", threads, busy, 0, {}, completed, completed, 0, 0.0, at,
                      stopped, failed)


def test_workers_are_what_they_say_and_what_they_hold() -> None:
    """A process's beat says what it is and did; a process that does not beat shows while it
    holds tasks, by its worker ids; a stopped one stays, idle, with what it did."""
    rows = worker_rows(
        [_running("c:3/0", 30.0, 31.0), _running("c:3/2", 32.0),
         _running("a:1", 80.0, 95.0)],
        [_beat("a:1", 96.0, threads=4, busy=1, completed=10, failed=2),
         _beat("b:2", 20.0, completed=5, failed=1, stopped=True)])
    assert [r.process for r in rows] == ["c:3", "a:1", "b:2"]  # busiest, then latest
    c, a, b = rows
    assert (c.threads, c.busy, c.heartbeat, c.last_seen, c.done) == (2, 2, 31.0, 32.0, 0)
    assert (a.threads, a.busy, a.heartbeat, a.done, a.errors) == (4, 1, 96.0, 10, 2)
    assert (b.threads, b.busy, b.last_seen, b.done, b.errors) == (0, 0, 20.0, 5, 1)
    now = 20.0 + LIVE_S + 1  # b stopped a minute ago; c still holds tasks
    assert live_threads(rows, now) == 2 + 4
    assert live_threads(worker_rows([]), now) is None


def test_a_runners_beat_counts_what_its_attempts_did(tmp_path: Path) -> None:
    """Real threads on a real SQLite file: done and errors in the worker view are the
    runner's own counts (a failed outcome, and an attempt of its own that timed out)."""
    import threading

    from taskfuse.runtime import App, Runner
    from taskfuse.store.sqlite import SQLiteStore

    app = App("beats")
    release = threading.Event()

    @app.task("ok", max_retry=0)
    def ok(ctx, payload):
        return payload

    @app.task("bad", max_retry=0)
    def bad(ctx, payload):
        raise ValueError("no")

    @app.task("slow", max_retry=0, timeout=0.2)
    def slow(ctx, payload):
        release.wait(30)  # ignores its stop: the watchdog times it out

    store = SQLiteStore(tmp_path / "t.db")
    runner = Runner(app, store, workers=2, worker_id="host:7").start()
    try:
        deadline = time.monotonic() + 30
        while not (seen := poll_store(store, time.time()).workers):  # its first beat
            assert time.monotonic() < deadline, "no beat from the runner"
            time.sleep(0.01)
        (started,) = seen
        assert (started.process, started.threads, started.done) == ("host:7", 2, 0)
        runner.submit_many([runner.spec("ok", i) for i in range(5)]
                           + [runner.spec("bad"), runner.spec("slow")])
        assert runner.join(30)
    finally:
        release.set()
        runner.shutdown(grace_s=5)  # its last beat
    (row,) = poll_store(store, time.time()).workers or ()
    assert (row.process, row.threads, row.busy, row.done, row.errors) == ("host:7", 0, 0, 6, 2)
    store.close()


def test_a_fast_poll_recounts_only_the_live_batches() -> None:
    """On a store without kept counts by batch (a schema from before them), the list of
    batches and a settled batch's counts read its rows: a fast poll reuses them, and counts
    again only batches with tasks PENDING or RUNNING; a slow poll asks all."""
    from taskfuse.store.memory import MemoryStore

    store = MemoryStore()
    fill_fleet(store)  # nightly: all ended; skus: running; backfill: queued
    asked: list[str] = []

    class Counting:
        """The store, with every question about batches written down."""

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        def batch_ids(self) -> list[str]:
            asked.append("ids")
            return store.batch_ids()

        def batch_counts(self) -> None:  # an older schema: no kept counts by batch
            return None

        def counts(self, batch_id: str | None = None) -> object:
            if batch_id is not None:
                asked.append(batch_id)
            return store.counts(batch_id)

    memory = BatchMemory()
    first = poll_store(Counting(), NOW, slow=False, memory=memory)  # nothing known: all
    assert asked == ["ids", "nightly", "skus", "backfill"]
    asked.clear()
    fast = poll_store(Counting(), NOW + 1, slow=False, memory=memory)
    assert asked == ["skus", "backfill"]
    assert fast.batches == first.batches
    asked.clear()
    poll_store(Counting(), NOW + 5, slow=True, memory=memory)
    assert asked == ["ids", "nightly", "skus", "backfill"]


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


def test_record_history_counts_in_words_and_names_the_operator() -> None:
    from taskfuse.core.states import TaskStatus
    from taskfuse.core.task import Task
    from tui.fleet import record_history

    task = Task(task_id="t", kind="k", status=TaskStatus.PENDING, retry_count=1,
                error_kind="http_503", error_msg="busy", created_at=10.0,
                operator_retries=2, operator_retried_at=50.0)
    lines = [(h.t, h.what) for h in record_history(task)]
    assert lines == [
        (10.0, "submitted"),
        (50.0, "retried by an operator: back to PENDING (2 times in all)"),
        (None, "1 earlier attempt ended in error; last: http_503: busy")]


@pytest.mark.parametrize("name", list(ALL_STORES))
def test_a_poll_reads_every_batch_in_one_query_of_the_kept_counts(name: str,
                                                                   tmp_path: Path) -> None:
    """With kept counts by batch, a poll, fast or slow, asks neither the list nor a batch's
    counts: one `batch_counts`, whatever moved since the last poll. A batch recorded with
    no task yet is listed, all zero, as `taskfuse status` lists it."""
    from taskfuse.core.task import Batch

    with ALL_STORES[name](tmp_path) as store:
        fill_fleet(store)
        store.put_batch(Batch("tomorrow", None, NOW))
        asked: list[str] = []

        class Counting:
            def __getattr__(self, attr: str) -> object:
                if attr in ("batch_ids", "batch_counts"):
                    asked.append(attr)
                return getattr(store, attr)

            def counts(self, batch_id: str | None = None) -> object:
                if batch_id is not None:
                    asked.append(batch_id)
                return store.counts(batch_id)

        memory = BatchMemory()
        for t, slow in ((NOW, True), (NOW + 1, False)):
            sample = poll_store(Counting(), t, slow=slow, memory=memory)
            assert asked == ["batch_counts"]
            asked.clear()
        rows = {b.batch_id: dict(b.counts) for b in sample.batches}
        assert list(rows) == store.batch_ids() and rows["tomorrow"] == dict.fromkeys(
            (s.value for s in TaskStatus), 0)
