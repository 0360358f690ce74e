"""Fleet-scoped downstreams: one bulkhead for every Runner on the database, not one each.

Worker processes are real Runners on PostgreSQL (tests/runtime/fleet_procs.py); what their
task functions do inside the downstream is counted by the database itself, so the peak is a
fact about the whole fleet. Without PostgreSQL the fleet tests fail under CI=true and are
skipped elsewhere; the configuration tests need no database.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, Runner, RuntimeConfigError
from taskfuse.store.memory import MemoryStore
from taskfuse.store.sqlite import SQLiteStore
from tests.runtime import fleet_procs
from tests.store.backends import PG_URL, pg_url, postgres_store

CTX = multiprocessing.get_context("spawn")


# -- configuration: no database needed -----------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_fleet_scope_without_postgres_is_refused_when_the_runner_is_built(kind, tmp_path) -> None:
    app = App()
    app.downstream("partner", bulkhead=14, scope="fleet")
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "t.db")
    with pytest.raises(RuntimeConfigError) as err:
        Runner(app, store)
    message = str(err.value)
    assert "\n" not in message
    assert "'partner'" in message and "PostgreSQL" in message and "instances=N" in message


def test_per_process_share_divides_the_limits_by_the_instance_count() -> None:
    app = App()
    app.downstream("partner", bulkhead=14, rate=100, burst=20, instances=4)
    guard = app.scheduler(MemoryStore()).guards["partner"]
    assert guard.bulkhead.limit == 3  # floor(14 / 4): 12 in all, never above 14
    assert guard.bucket.rate == 25 and guard.bucket.burst == 5


def test_fleet_scope_keeps_a_local_queue_and_drops_the_local_bucket() -> None:
    app = App()
    app.downstream("partner", bulkhead=3, rate=50, scope="fleet")
    guard = app.scheduler(MemoryStore()).guards["partner"]
    assert guard.bulkhead.limit == 3 and guard.bucket is None  # the fleet's bucket counts


@pytest.mark.parametrize("options, words", [
    ({"bulkhead": 3, "scope": "fleet", "instances": 2}, "instances"),
    ({"scope": "fleet"}, "bulkhead or a rate"),
    ({"bulkhead": 3, "scope": "cluster"}, "scope"),
    ({"bulkhead": 3, "instances": 0}, "instances"),
])
def test_contradictory_options_are_refused_at_configuration(options, words) -> None:
    with pytest.raises(RuntimeConfigError, match=f"'partner'.*{words}"):
        App().downstream("partner", **options)


# -- on PostgreSQL, with real worker processes -----------------------------------------------


@pytest.fixture
def store() -> Iterator[Any]:
    with postgres_store(pool_max=4) as made:
        fleet_procs.create_probe(PG_URL, made.schema)
        fleet_procs.configure(PG_URL, made.schema)
        yield made


def _probe(store: Any) -> tuple[int, int]:
    with psycopg.connect(PG_URL) as conn:
        row = conn.execute(f"SELECT n, peak FROM {store.schema}.probe").fetchone()
    return row[0], row[1]


def _calls(store: Any, kind: str) -> list[tuple[str, float]]:
    with psycopg.connect(PG_URL) as conn:
        return conn.execute(f"SELECT worker, entered FROM {store.schema}.calls WHERE kind = %s "
                            "ORDER BY entered", (kind,)).fetchall()


def _start_workers(store: Any, n: int, bulkhead: int, lease_s: float,
                   workers: int) -> tuple[list[Any], list[Any]]:
    """n worker processes, each told to stop by its own Event (setting one that a killed
    process was waiting on can block forever)."""
    ready, done = CTX.Queue(), [CTX.Event() for _ in range(n)]
    procs = [CTX.Process(target=fleet_procs.serve, daemon=True,
                         args=(pg_url(store.schema), PG_URL, store.schema, bulkhead, lease_s,
                               workers, ready, event)) for event in done]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=30)
    return procs, done


def _stop_workers(procs: list[Any], done: list[Any]) -> None:
    for proc, event in zip(procs, done, strict=True):
        if proc.is_alive():
            event.set()
    for proc in procs:
        proc.join(15)
        if proc.is_alive():
            proc.kill()


def _wait_until(check: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_fleet_bulkhead_holds_across_three_worker_processes(store, make_runner) -> None:
    procs, done = _start_workers(store, n=3, bulkhead=2, lease_s=30.0, workers=3)
    try:
        submitter = make_runner(fleet_procs.make_app(2), store, start=False)
        tasks = submitter.submit_many([submitter.spec("call", {"hold_s": 0.05})
                                       for _ in range(24)])
        assert _wait_until(lambda: store.counts()[TaskStatus.SUCCESS] == len(tasks), 30)
    finally:
        _stop_workers(procs, done)
    inside, peak = _probe(store)
    assert inside == 0
    assert peak == 2  # 9 threads in 3 processes wanted in; never more than 2 at once
    calls = _calls(store, "call")
    # the permits were shared across processes (which ones win the claims is a race: with
    # prefetch one process may take every task the bulkhead lets it, so two of three is
    # what the test can ask without hoping)
    assert len(calls) == 24 and len({worker for worker, _ in calls}) >= 2


def test_a_killed_worker_does_not_leak_its_permit(store, make_runner) -> None:
    lease = 1.5
    [hog_proc], done = _start_workers(store, n=1, bulkhead=1, lease_s=lease, workers=1)
    try:
        runner = make_runner(fleet_procs.make_app(1, lease), store, start=False, workers=1)
        runner.submit("hog", {"hold_s": 120.0})
        assert _wait_until(lambda: _calls(store, "hog"), 15)
        runner.start()
        task = runner.submit("call", {"hold_s": 0.0})
        time.sleep(2 * lease)  # the hog's heartbeat keeps renewing its permit meanwhile
        assert not _calls(store, "call")
        hog_proc.kill()  # SIGKILL: no release, no cleanup
        hog_proc.join(10)
        killed_at = time.time()
        assert _wait_until(lambda: runner.get(task.task_id).status is TaskStatus.SUCCESS, 15)
    finally:
        _stop_workers([hog_proc], done)
    [(_, entered)] = _calls(store, "call")
    assert entered - killed_at < lease + 1.5  # the lease lapsed; the waiter took the slot


def test_a_release_wakes_a_waiter_in_another_runner_at_once(store, make_runner) -> None:
    runner = make_runner(fleet_procs.make_app(1), store, workers=1)
    bulkhead = runner.fleet["partner"].bulkhead
    latencies = []
    for _ in range(2):
        permit = bulkhead.try_acquire("test")
        assert permit is not None
        before = len(_calls(store, "call"))
        runner.submit("call", {"hold_s": 0.0})
        time.sleep(0.6)  # the task is waiting now; a 1 s poll would find the slot ~0.4 s late
        assert len(_calls(store, "call")) == before
        released_at = time.time()
        bulkhead.release(permit)
        assert _wait_until(lambda b=before: len(_calls(store, "call")) > b, 10)
        latencies.append(_calls(store, "call")[-1][1] - released_at)
    assert max(latencies) < 0.3, latencies  # a 1 s poll would show ~0.4 s


def test_a_task_canceled_while_waiting_gives_up_without_a_permit(store, make_runner) -> None:
    runner = make_runner(fleet_procs.make_app(1), store, workers=1)
    bulkhead = runner.fleet["partner"].bulkhead
    permit = bulkhead.try_acquire("test")
    task = runner.submit("call", {"hold_s": 0.0})
    assert _wait_until(lambda: runner.get(task.task_id).status is TaskStatus.RUNNING, 10)
    runner.cancel(task.task_id)
    assert _wait_until(lambda: runner.fleet["partner"].bulkhead.in_use() == 1
                       and not runner.running_tasks(), 5)
    assert bulkhead.release(permit) and bulkhead.in_use() == 0
    assert not _calls(store, "call")
