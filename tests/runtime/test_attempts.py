"""An attempt is an identity: a timed-out attempt that keeps running is refused at every store
call (heartbeat, cancellation check, completion, release) and gets no downstream permit while
its retry runs on the same worker, on memory, SQLite and PostgreSQL.

The runners' wall clock is the test's (`Clock`): the timeout happens when the test moves the
clock past the deadline and runs the watchdog's pass itself, and every wait is on an event
the code under test sets, so no step depends on how fast the machine is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.retry import Backoff, BackoffKind, RetryPolicy
from taskfuse.core.states import TaskStatus
from taskfuse.limits.schema import KindLimits, Limits
from taskfuse.runtime import App, Runner, TaskCanceled
from taskfuse.runtime.context import TaskContext
from taskfuse.store.memory import MemoryStore
from tests.runtime.conftest import JOIN_S
from tests.store.backends import postgres_store, sqlite_store

NO_WAIT = RetryPolicy(max_retry=2, backoff=Backoff(BackoffKind.NONE))
#: What a stale attempt hears at every call: not yours, stop.
STALE = {"heartbeat": False, "store_says_stop": True, "cancelled": True,
         "called_downstream": False}
#: Long enough that no runner's own watchdog or heartbeat fires unless the test says so.
NEVER_S = 3600.0


class Clock:
    """The runners' wall clock (`Runner(clock=...)`), moved only by the test."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class SharedMemoryStore:
    """A MemoryStore two runners in one process share: every call under one lock.

    A runner guards a MemoryStore with its own lock; two runners need a common one.
    """

    def __init__(self) -> None:
        self._store = MemoryStore()
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def locked(*args: Any, **kw: Any) -> Any:
            with self._lock:
                return attr(*args, **kw)

        return locked


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def open_store(request, tmp_path: Path) -> Iterator[Callable[[bool], Any]]:
    """`open_store(shared)`: the store of this run; `shared`: two runners will use it."""
    if request.param == "memory":
        yield lambda shared: SharedMemoryStore() if shared else MemoryStore()
        return
    factory = sqlite_store if request.param == "sqlite" else postgres_store
    with factory(tmp_path) as durable:  # thread-safe: runners share it as it is
        yield lambda shared: durable


class Job:
    """A task function whose first attempt hangs (ignoring its stop) until told to probe the
    store as a stale attempt would, then hangs again until told to return."""

    def __init__(self) -> None:
        self.first: TaskContext | None = None
        self.first_started = threading.Event()
        self.probe = threading.Event()
        self.probed = threading.Event()
        self.finish_first = threading.Event()
        self.second_started = threading.Event()
        self.finish_second = threading.Event()
        self.answers: dict[str, bool] = {}

    def __call__(self, ctx: TaskContext, payload: Any) -> str:
        if ctx.attempt == 1:
            self.first = ctx
            self.first_started.set()
            assert self.probe.wait(JOIN_S)
            scheduler = ctx.host.scheduler
            self.answers["heartbeat"] = ctx.heartbeat()
            self.answers["store_says_stop"] = scheduler.is_cancelled(ctx.task)
            self.answers["cancelled"] = ctx.cancelled()
            try:
                with ctx.downstream("partner"):
                    self.answers["called_downstream"] = True
            except TaskCanceled:
                self.answers["called_downstream"] = False
            self.probed.set()
            assert self.finish_first.wait(JOIN_S)
            return "stale"
        self.second_started.set()
        assert self.finish_second.wait(JOIN_S)
        return "fresh"


def _app(job: Job) -> App:
    """`overlap`: attempt 2 may start beside attempt 1 on one runner. Without it the retry
    waits for attempt 1 once the runner knows it stopped (its next heartbeat, 20 ms here),
    so attempt 2 ran only when the claim won that race (and hung the test when it lost)."""
    app = App(policy=NO_WAIT, lease_s=30.0)
    app.downstream("partner", bulkhead=1)
    app.task("job", timeout=60.0)(job)
    return app.configure(Limits(kinds={"job": KindLimits(overlap=True)}))


def _wait(predicate: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for a state the code under test reaches on its own threads."""
    end = time.monotonic() + JOIN_S
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.005)


def _time_out(runner: Runner, clock: Clock, task_id: str) -> None:
    """Move the clock past the deadline and run the watchdog's pass: a retry, not a stop.

    The pass is the scheduler's `expire`, as another process's watchdog would run it, so
    the runner of the first attempt is not told: only its store calls can tell it. (The
    runner's own watchdog makes one pass when its thread starts; if that pass comes after
    the clock moved, it is the one that times the attempt out. Either way: a retry.)
    """
    clock.advance(61.0)
    with runner.lock:
        runner.scheduler.expire(clock())
    retried = runner.get(task_id)
    assert retried.retry_count == 1 and retried.error_kind == "timeout"


def test_stale_attempt_is_refused_while_its_retry_runs_on_the_same_worker(
    open_store, make_runner
) -> None:
    """Two runners under one worker id (two runners in one process with the default
    host:pid id, or a restarted worker with the same name): attempt 1 hangs on the first,
    attempt 2 runs on the second, as the same worker "w"."""
    job, clock = Job(), Clock()
    store = open_store(True)
    first = make_runner(_app(job), store=store, workers=1, worker_id="w", clock=clock,
                        heartbeat_s=0.02, watchdog_s=NEVER_S)
    task = first.submit("job")
    assert job.first_started.wait(JOIN_S)
    _time_out(first, clock, task.task_id)
    second = make_runner(_app(job), store=store, workers=1, worker_id="w", clock=clock,
                         heartbeat_s=NEVER_S, watchdog_s=NEVER_S)
    assert job.second_started.wait(JOIN_S)
    attempt2 = store.get(task.task_id)
    assert (attempt2.status, attempt2.worker_id) == (TaskStatus.RUNNING, "w")
    assert job.first is not None and job.first.task.worker_id == "w"
    clock.advance(1.0)  # a renewal from now on would be visible in heartbeat_at

    # The runner of attempt 1 renews its leases every 20 ms: refused, it stops the attempt.
    _wait(lambda: job.first.stopped, "the first runner's heartbeat is refused")
    job.probe.set()
    assert job.probed.wait(JOIN_S)
    assert job.answers == STALE
    assert store.get(task.task_id) == attempt2  # nothing renewed, nothing moved

    assert first.shutdown(grace_s=0) == []  # its release is refused: attempt 2 stays
    assert store.get(task.task_id) == attempt2
    job.finish_first.set()
    first.shutdown(grace_s=JOIN_S)  # joins the worker: its completion loses the race
    assert (first.stats.discarded, first.stats.completed) == (1, 0)
    assert store.get(task.task_id) == attempt2

    job.finish_second.set()
    assert second.join(JOIN_S)
    final = store.get(task.task_id)
    assert (final.status, final.result, final.retry_count) == (TaskStatus.SUCCESS, "fresh", 1)
    assert second.stats.completed == 1


def test_runner_tells_two_attempts_of_one_task_apart(open_store, make_runner) -> None:
    """One runner, two worker threads: attempt 1 hangs on one, attempt 2 runs on the other.
    The runner renews attempt 2 only, stops attempt 1, keeps attempt 2 after attempt 1's
    late result, and releases attempt 2 (only) at shutdown."""
    job, clock = Job(), Clock()
    store = open_store(False)
    runner = make_runner(_app(job), store=store, workers=2, worker_id="w", clock=clock,
                         heartbeat_s=0.02, watchdog_s=NEVER_S)
    task = runner.submit("job")
    assert job.first_started.wait(JOIN_S)
    _time_out(runner, clock, task.task_id)
    with runner.lock:
        runner.work_changed()  # what the store's notification does
    assert job.second_started.wait(JOIN_S)
    attempt2 = runner.get(task.task_id)

    def renewed_at(at: float) -> Callable[[], bool]:
        return lambda: runner.get(task.task_id).heartbeat_at == at

    _wait(lambda: job.first.stopped, "the heartbeat refuses attempt 1")
    _wait(renewed_at(clock.advance(1.0)), "the heartbeat renews attempt 2")
    job.probe.set()
    assert job.probed.wait(JOIN_S)
    assert job.answers == STALE
    job.finish_first.set()
    _wait(lambda: runner.stats.discarded == 1, "attempt 1's late result is discarded")
    _wait(renewed_at(clock.advance(1.0)), "attempt 2 is still renewed")

    released = runner.shutdown(grace_s=0)
    assert [(t.task_id, t.status, t.version) for t in released] == [
        (task.task_id, TaskStatus.PENDING, attempt2.version + 1)
    ]
    job.finish_second.set()
    runner.shutdown(grace_s=JOIN_S)
    assert (runner.stats.discarded, runner.stats.completed) == (2, 0)
    final = runner.get(task.task_id)
    assert (final.status, final.retry_count) == (TaskStatus.PENDING, 1)
