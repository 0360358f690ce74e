"""Leases and the orphan sweeper: a live slow worker keeps its task, a dead one loses it."""

from __future__ import annotations

import threading
import time

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from taskfuse.runtime import App
from taskfuse.runtime.sweeper import run_sweeper, sweep_once, sweeper_scheduler
from taskfuse.store.memory import MemoryStore
from tests.runtime.conftest import JOIN_S


def test_heartbeats_keep_a_slow_task_from_being_swept(make_runner) -> None:
    app = App(lease_s=0.15)
    started, release = threading.Event(), threading.Event()

    @app.task("slow")
    def slow(ctx, payload):
        started.set()
        release.wait(JOIN_S)
        return "alive"

    runner = make_runner(app, workers=1)
    task = runner.submit("slow")
    assert started.wait(JOIN_S)
    sweeper = sweeper_scheduler(runner.store, lease_s=0.15)
    for _ in range(4):  # well past the lease, renewed every 0.05 s
        time.sleep(0.1)
        with runner.lock:
            assert sweep_once(sweeper, time.time()) == []
    release.set()
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.SUCCESS


def test_task_of_a_dead_worker_is_swept_back_and_finished_by_another(make_runner) -> None:
    store = MemoryStore()
    app = App()

    @app.task("job")
    def job(ctx, payload):
        return ctx.attempt

    dead = app.scheduler(store)
    task = dead.submit(TaskSpec("job", max_retry=2), time.time())
    dead.claim("crashed-worker", time.time())  # and then the process died: no heartbeats
    sweeper = sweeper_scheduler(store, lease_s=0.05)
    time.sleep(0.1)
    assert run_sweeper(sweeper, once=True) == 1
    swept = store.get(task.task_id)
    assert swept.status is TaskStatus.PENDING and swept.retry_count == 1
    assert swept.error_kind == "orphaned"
    runner = make_runner(app, store=store)
    assert runner.join(JOIN_S)
    final = store.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == 2


def test_sweeper_fails_an_orphan_with_no_attempts_left_and_expires_old_pending() -> None:
    store = MemoryStore()
    sched = App().scheduler(store)
    now = time.time()
    orphan = sched.submit(TaskSpec("job", max_retry=0), now - 100)
    sched.claim("gone", now - 100)
    stale = sched.submit(TaskSpec("job"), now - 100)
    sweeper = sweeper_scheduler(store, lease_s=30.0, max_pending_age_s=50.0)
    moved = {t.task_id: t for t in sweep_once(sweeper, now)}
    assert moved[orphan.task_id].status is TaskStatus.FAILED
    assert moved[orphan.task_id].error_msg == "worker crashed or task hung"
    assert moved[stale.task_id].status is TaskStatus.CANCELED


def test_sweeper_loop_stops_when_told() -> None:
    stop = threading.Event()
    sweeper = sweeper_scheduler(MemoryStore())
    passes: list[float] = []
    stopper = threading.Timer(0.1, stop.set)
    stopper.start()
    total = run_sweeper(sweeper, every_s=0.02, stop=stop, clock=lambda: passes.append(1) or 0.0)
    stopper.join()
    assert total == 0 and len(passes) >= 2


def test_sweeper_loop_passes_hold_the_lock_and_report_moves() -> None:
    """What a process running workers on the same Scheduler needs (the load test): each
    pass under its fuse lock, and word of what moved, given under that lock too."""
    store = MemoryStore()
    sched = App().scheduler(store)
    orphan = sched.submit(TaskSpec("job", max_retry=1), 0.0)
    sched.claim("gone", 0.0)
    lock = threading.RLock()
    heard: list[tuple[list[str], bool]] = []
    stop = threading.Event()

    def on_moved(moved) -> None:
        heard.append(([t.task_id for t in moved], lock._is_owned()))
        stop.set()

    passes: list[float] = []

    def clock() -> float:  # the lease (30 s) lapses by the second pass; at most 5 passes
        passes.append(1.0 if not passes else 100.0)
        if len(passes) >= 5:
            stop.set()
        return passes[-1]

    total = run_sweeper(sweeper_scheduler(store, lease_s=30.0), every_s=0.001, stop=stop,
                        clock=clock, lock=lock, on_moved=on_moved)
    assert total == 1 and heard == [([orphan.task_id], True)]
    assert store.get(orphan.task_id).status is TaskStatus.PENDING


def test_attempt_whose_lease_was_taken_away_stops_and_its_result_is_discarded(
    make_runner,
) -> None:
    app = App(lease_s=0.1)
    first_started = threading.Event()
    first_saw_it: list[bool] = []

    @app.task("job", max_retry=1)
    def job(ctx, payload):
        if ctx.attempt == 1:
            first_started.set()
            while not ctx.cancelled():  # the sweeper moves the record on without us
                time.sleep(0.01)
            first_saw_it.append(True)
            return "stale"
        return "fresh"

    runner = make_runner(app, workers=2, heartbeat_s=60.0)  # a worker too busy to renew
    task = runner.submit("job")
    assert first_started.wait(JOIN_S)
    time.sleep(0.2)
    with runner.lock:
        moved = sweep_once(sweeper_scheduler(runner.store, lease_s=0.1), time.time())
        runner.work_changed()
    assert [t.task_id for t in moved] == [task.task_id]
    assert runner.join(JOIN_S)
    runner.shutdown(grace_s=JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS and final.result == "fresh"
    assert first_saw_it == [True] and runner.stats.discarded == 1


def test_lapsed_leases_wait_a_lease_after_the_store_answers_again() -> None:
    """A fake clock and a figure of "answering for": within a lease of the database coming
    back a lapsed lease is not an orphan (its worker could not renew it); a lease later it
    is, and the other rules do not wait."""
    store = MemoryStore()
    sched = App().scheduler(store)
    orphan = sched.submit(TaskSpec("job", max_retry=2), 1000.0)
    sched.claim("gone", 1000.0)
    stale = sched.submit(TaskSpec("job"), 1000.0)
    sweeper = sweeper_scheduler(store, lease_s=30.0, max_pending_age_s=50.0)
    now = 1100.0  # the lease lapsed 70 s ago by the clock
    assert [t.task_id for t in sweeper.sweep(now, answering_for_s=29.9)] == [stale.task_id]
    assert store.get(orphan.task_id).status is TaskStatus.RUNNING
    moved = sweeper.sweep(now, answering_for_s=30.0)
    assert [(t.task_id, t.status) for t in moved] == [(orphan.task_id, TaskStatus.PENDING)]
