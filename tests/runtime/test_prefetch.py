"""The grouped runtime's promises about what it claims ahead (issue 13), on real stores.

A runner claims as many tasks as its free threads plus a prefetch. Those tasks are RUNNING
in the store from their claim, so the promises are about the store's records: a prefetch
never takes what a bulkhead or a batch cap could not start, prefetched tasks keep their
leases while they wait, and a shutdown hands the ones that never started back at once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.events import THREAD_WAIT, Event, EventKind
from taskfuse.core.metrics import MetricsAggregator
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Task, TaskSpec
from taskfuse.limits.schema import Limits
from taskfuse.runtime import App, Runner
from taskfuse.runtime.sweeper import sweep_once, sweeper_scheduler
from taskfuse.store.sqlite import SQLiteStore
from tests.runtime.conftest import JOIN_S
from tests.store.backends import drop_schema, need_pg, new_schema, pg_url

RUNNING, SUCCESS, PENDING = TaskStatus.RUNNING, TaskStatus.SUCCESS, TaskStatus.PENDING


def wait_until(condition: Callable[[], bool], timeout: float = JOIN_S) -> bool:
    """Whether `condition` held within `timeout` (asked every few milliseconds)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def add_noop(app: App) -> None:
    @app.task("noop")
    def noop(ctx: Any, payload: Any) -> Any:
        return payload


def warm(runner: Runner) -> None:
    """Run short tasks until the runner has learned they are short: its prefetch opens."""
    runner.submit_batch([runner.spec("noop", i) for i in range(40)], "warm")
    assert runner.join(JOIN_S, batch_id="warm")
    with runner.attempts.mu:
        assert runner.attempts.prefetch_now() >= 4 * runner.workers


def running(runner: Runner, tasks: list[Task]) -> list[str]:
    """Which of `tasks` the store holds RUNNING now."""
    return [t.task_id for t in tasks if runner.get(t.task_id).status is RUNNING]


class FakeClock:
    """The runner's and the sweeper's `now`; waits stay real (they are short here)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- 1. a prefetch never claims what a fuse could not start ---------------------------------


def test_long_tasks_are_never_claimed_past_a_bulkhead(make_runner, tmp_path: Path) -> None:
    """Tasks the runner takes for long (it has seen none finish): a bulkhead of 1 with 4
    threads, and exactly one of its tasks is RUNNING at any step."""
    app = App()
    app.downstream("partner", bulkhead=1)
    add_noop(app)
    gate, started = threading.Semaphore(0), queue.Queue[str]()

    @app.task("call", downstreams=("partner",))
    def call(ctx: Any, payload: Any) -> Any:
        with ctx.downstream("partner"):
            started.put(ctx.task_id)
            assert gate.acquire(timeout=JOIN_S)
        return payload

    runner = make_runner(app, store=SQLiteStore(tmp_path / "t.db"), workers=4)
    calls = runner.submit_many([runner.spec("call", i) for i in range(6)])
    done: list[str] = []
    for i in range(6):
        task_id = started.get(timeout=JOIN_S)
        # the previous call's outcome is committed: whatever is RUNNING was claimed for it
        assert wait_until(lambda: all(runner.get(t).status is SUCCESS for t in done))
        assert running(runner, calls) == [task_id]  # the bulkhead's 1, none held ahead
        if i == 5:  # the bulkhead is full: the other threads still take other work
            free = runner.submit_batch([runner.spec("noop", j) for j in range(20)], "free")
            assert runner.join(JOIN_S, batch_id="free")
            assert {runner.get(t.task_id).status for t in free} == {SUCCESS}
            assert running(runner, calls) == [task_id]
        gate.release()
        done.append(task_id)
    assert runner.join(JOIN_S)
    assert {runner.get(t.task_id).retry_count for t in calls} == {0}


def test_short_tasks_are_claimed_past_a_bulkhead_by_its_prefetch_only(
        make_runner, tmp_path: Path) -> None:
    """Short tasks: a bulkhead of k holds k plus k times the prefetch per thread, as the
    threads hold theirs (about 50 ms of work ahead), and not one more."""
    app = App()
    app.downstream("partner", bulkhead=2)
    add_noop(app)
    release = threading.Event()

    @app.task("call", downstreams=("partner",))
    def call(ctx: Any, payload: Any) -> Any:
        with ctx.downstream("partner"):
            assert release.wait(JOIN_S)
        return payload

    runner = make_runner(app, store=SQLiteStore(tmp_path / "t.db"), workers=4)
    warm(runner)
    with runner.attempts.mu:
        per_thread = runner.attempts.prefetch_now() // 4
    assert per_thread == 32  # the most there is: 128 for 4 threads
    bound = 2 + 2 * per_thread
    calls = runner.submit_many([runner.spec("call", i) for i in range(bound + 30)])
    assert wait_until(lambda: len(running(runner, calls)) == bound)
    # The claims land before the threads take their tasks from the buffer: wait for them.
    assert wait_until(lambda: runner.attempts.busy() == 4)  # two inside, two queued
    with runner.attempts.mu:
        full, _ = runner.claimer.bulkhead_room()
        assert full == {"partner"}  # the claimer takes none of them until one finishes
        assert runner.attempts.busy() == 4
    assert len(running(runner, calls)) == bound
    release.set()
    assert runner.join(JOIN_S)
    assert {runner.get(t.task_id).status for t in calls} == {SUCCESS}


def test_a_prefetch_never_claims_past_a_batch_cap(make_runner, tmp_path: Path) -> None:
    app = App()
    add_noop(app)
    gate, started = threading.Semaphore(0), queue.Queue[str]()

    @app.task("hold")
    def hold(ctx: Any, payload: Any) -> Any:
        started.put(ctx.task_id)
        assert gate.acquire(timeout=JOIN_S)
        return payload

    runner = make_runner(app, store=SQLiteStore(tmp_path / "t.db"), workers=4)
    warm(runner)
    tasks = runner.submit_batch([runner.spec("hold", i) for i in range(8)], "capped", cap=2)
    first = {started.get(timeout=JOIN_S), started.get(timeout=JOIN_S)}
    assert set(running(runner, tasks)) == first  # two threads idle, nothing held ahead
    done: list[str] = []
    for _ in range(6):
        gate.release()
        started.get(timeout=JOIN_S)
        assert wait_until(lambda: sum(runner.get(t.task_id).status is SUCCESS
                                      for t in tasks) == len(done) + 1)
        done.append("")
        assert len(running(runner, tasks)) == 2
        with runner.attempts.mu:
            assert not runner.attempts.buffer
    for _ in range(2):
        gate.release()
    assert runner.join(JOIN_S)
    assert runner.counts("capped")[SUCCESS] == 8


# -- 2. prefetched tasks keep their leases ------------------------------------------------------


def test_prefetched_tasks_keep_their_lease_past_its_length(make_runner, tmp_path: Path) -> None:
    lease_s = 1.0
    app = App(lease_s=lease_s)
    add_noop(app)
    release, began = threading.Event(), threading.Event()
    ran: Counter[str] = Counter()

    @app.task("first", priority=9)
    def first(ctx: Any, payload: Any) -> Any:
        began.set()
        assert release.wait(JOIN_S)

    @app.task("later")
    def later(ctx: Any, payload: Any) -> Any:
        ran[ctx.task_id] += 1

    clock = FakeClock(1_000_000.0)
    store = SQLiteStore(tmp_path / "t.db")
    dead = app.scheduler(store)  # a worker that claimed a task and died: no heartbeats
    [ghost] = dead.submit_many([TaskSpec("later")], clock())
    dead.claim("dead-worker", clock())
    runner = make_runner(app, store=store, workers=1, clock=clock, heartbeat_s=0.02)
    warm(runner)
    tasks = runner.submit_many([runner.spec("first"), *[runner.spec("later", i)
                                                       for i in range(5)]])
    assert began.wait(JOIN_S)
    held = [t.task_id for t in tasks[1:]]
    assert wait_until(lambda: running(runner, tasks[1:]) == held)  # claimed ahead...
    assert not ran  # ...and waiting for the one thread
    clock.t += 5 * lease_s  # far past the lease; the heartbeat renews them at the new time
    assert wait_until(lambda: all(runner.get(t).heartbeat_at >= clock.t for t in held))
    sweeper = sweeper_scheduler(store, lease_s=lease_s)
    assert [t.task_id for t in sweep_once(sweeper, clock())] == [ghost.task_id]
    assert running(runner, tasks) == [t.task_id for t in tasks]
    release.set()
    assert runner.join(JOIN_S)
    assert set(ran) == {*held, ghost.task_id} and set(ran.values()) == {1}
    assert {runner.get(t.task_id).retry_count for t in tasks} == {0}  # never taken back
    assert runner.get(ghost.task_id).retry_count == 1


# -- 3. at shutdown, prefetched tasks go back at once ------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens a new connection to one store (SQLite file or PostgreSQL schema) each call."""
    if request.param == "sqlite":
        yield lambda: SQLiteStore(tmp_path / "t.db")
        return
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    try:
        yield lambda: PostgresStore(pg_url(schema))
    finally:
        drop_schema(schema)


def test_shutdown_hands_prefetched_tasks_back_at_once(opener, make_runner) -> None:
    app = App(lease_s=60.0)  # no lease lapses within this test: only the release moves them
    add_noop(app)
    release, began = threading.Event(), threading.Event()
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    @app.task("first", priority=9)
    def first(ctx: Any, payload: Any) -> Any:
        began.set()
        assert release.wait(JOIN_S)
        with lock:
            ran[ctx.task_id] += 1

    @app.task("later")
    def later(ctx: Any, payload: Any) -> Any:
        with lock:
            ran[ctx.task_id] += 1

    old = make_runner(app, store=opener(), workers=1, worker_id="old")
    warm(old)
    tasks = old.submit_many([old.spec("first"), *[old.spec("later", i) for i in range(5)]])
    held = tasks[1:]
    assert began.wait(JOIN_S)
    assert wait_until(lambda: len(running(old, held)) == 5)  # claimed ahead, never started
    released: list[Task] = []
    stopping = threading.Thread(target=lambda: released.extend(old.shutdown(grace_s=JOIN_S)))
    stopping.start()
    try:  # back while the running task still has its grace: at once, not at its end
        assert wait_until(lambda: all(old.get(t.task_id).status is PENDING for t in held))
        assert running(old, tasks) == [tasks[0].task_id]
    finally:
        release.set()
        stopping.join(JOIN_S)
    assert not stopping.is_alive()
    assert sorted(t.task_id for t in released) == sorted(t.task_id for t in held)
    for task in held:
        back = old.get(task.task_id)
        assert back.retry_count == 0 and back.worker_id is None  # a release uses no attempt
    assert old.get(tasks[0].task_id).status is SUCCESS  # it finished within its grace
    new = make_runner(app, store=opener(), workers=2, worker_id="new")
    assert new.join(JOIN_S)
    assert {new.get(t.task_id).status for t in tasks} == {SUCCESS}
    assert set(ran) == {t.task_id for t in tasks} and set(ran.values()) == {1}
    assert {new.get(t.task_id).worker_id for t in held} == {"new"}


# -- 5. claim_batch means the same in the runtime as in the lab --------------------------------


@pytest.mark.parametrize(("claim_batch", "held"), [(1, 2), (3, 6)])
def test_claim_batch_is_how_many_tasks_a_thread_holds(make_runner, tmp_path: Path,
                                                      claim_batch: int, held: int) -> None:
    """Long tasks (the runner has seen none finish, so it takes them for long): by default a
    thread holds only the task it runs; with claim_batch n it holds n, the one it runs and
    n - 1 claimed ahead, as a worker of the lab does."""
    app = App()
    app.configure(Limits(claim_batch=claim_batch))
    release = threading.Event()
    began: queue.Queue[str] = queue.Queue()
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    @app.task("hold")
    def hold(ctx: Any, payload: Any) -> Any:
        began.put(ctx.task_id)
        assert release.wait(JOIN_S)
        with lock:
            ran[ctx.task_id] += 1

    runner = make_runner(app, store=SQLiteStore(tmp_path / "t.db"), workers=2)
    tasks = runner.submit_many([runner.spec("hold", i) for i in range(10)])
    for _ in range(2):
        began.get(timeout=JOIN_S)
    assert wait_until(lambda: len(running(runner, tasks)) == held)
    with runner.attempts.mu:  # the claimer wants no more: this is where it stays
        assert runner.attempts.want() == 0
        assert len(runner.attempts.buffer) == held - 2
    assert len(running(runner, tasks)) == held
    release.set()
    assert runner.join(JOIN_S)
    assert set(ran) == {t.task_id for t in tasks} and set(ran.values()) == {1}


# -- 6. a prefetched task's run time counts from when a thread takes it ------------------------


def test_a_prefetched_tasks_wait_for_a_thread_is_not_run_time(make_runner, tmp_path: Path
                                                              ) -> None:
    """One thread holding two tasks (claim_batch 2), both claimed at t=100: the second waits
    in the buffer until the first ends at t=105, then runs 1 s. The runner says so with a
    WAIT for a thread of 5 s, and the run times are 5 and 1 s, not 5 and 6 (the lab claims
    for a free worker only, so its run times never hold that wait)."""
    app = App()
    app.configure(Limits(claim_batch=2))
    clock = FakeClock(100.0)
    release, began = threading.Event(), threading.Event()
    metrics = MetricsAggregator()
    events: list[Event] = []
    store = SQLiteStore(tmp_path / "t.db")

    @app.task("step")
    def step(ctx: Any, payload: Any) -> Any:
        if payload == "first":
            began.set()
            assert release.wait(JOIN_S)
        else:  # the first is committed at 105 before this one's second passes
            assert wait_until(lambda: store.get(first.task_id).status is SUCCESS)
            clock.t = 106.0

    runner = make_runner(app, store=store, workers=1, clock=clock,
                         sinks=[metrics, events.append])
    first, second = runner.submit_many([runner.spec("step", "first"),
                                        runner.spec("step", "second")])
    assert wait_until(lambda: len(running(runner, [first, second])) == 2)
    # a thread took the first at t=100: on a busy machine it could wake only after the
    # clock moved on, and the first showed a wait too (3 of 8 runs beside other jobs)
    assert began.wait(JOIN_S)
    clock.t = 105.0
    release.set()
    assert runner.join(JOIN_S)
    waits = [(e.task_id, e.value) for e in events
             if e.kind == EventKind.WAIT and e.reason == THREAD_WAIT]
    assert waits == [(second.task_id, 5.0)]
    assert sorted(d for ds in metrics.durations.values() for d in ds) == [1.0, 5.0]
