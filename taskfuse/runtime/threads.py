"""The threaded runner: the core Scheduler driven in real time by worker threads.

Theory of operation
-------------------
The runner is an interpreter of the core's answers; it never decides a delay, a limit or a
next status. Its threads:

* N workers: `claim` -> `Work` (run the task, then `complete`) or `Idle(until)` (wait on a
  Condition until notified of new work — a submit, a task back in PENDING, a freed batch
  slot, a breaker that closed — or until `until`). With a durable store that other
  processes write to, the wait is also bounded by `poll_s`, or woken by the store's own
  `wait_for_work` when it has one (a listener thread).
* a watchdog: `expire(now)` at the next deadline (it is poked when a task with an earlier
  deadline starts) and at least every `watchdog_s`.
* a heartbeat: renews the lease of every task this runner runs, every `heartbeat_s`; a
  refused renewal means the task was taken away (the attempt is told to stop).

One lock (`lock`) is held around every Scheduler and store call, and never while user code
runs: MemoryStore and the fuses are not thread-safe, and decisions must be atomic with
respect to each other. The core is given wall-clock `now` (time.time()), because durable
stores compare times across processes; intervals are measured with time.monotonic.

Stopping a running task is cooperative: a cancel, a timeout, a lost lease or a release at
shutdown sets the attempt's stop Event (seen by `ctx.cancelled()` and `ctx.sleep()`), and
whatever it returns later loses the version check (`LostRace`) and is discarded.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskfuse.core.events import Event, EventKind, EventSink
from taskfuse.core.scheduler import Completed, Idle, LostRace, Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import Attempt, Store, attempt_of
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.runtime.app import App
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.errors import RESULT_ERROR, TaskError, outcome_of
from taskfuse.runtime.fleet import FleetLimits
from taskfuse.store.memory import MemoryStore

log = logging.getLogger("taskfuse.runtime")

_UNFINISHED = (TaskStatus.PENDING, TaskStatus.RUNNING)
#: Added to a deadline before the watchdog looks: expire() wants started_at + timeout < now.
_DEADLINE_SLACK_S = 0.002
#: Bound of idle waits on a durable store: without notifications, and with them (a net).
_POLL_S = 0.25
_LISTEN_BOUND_S = 1.0
#: Longest pause after a store error in a worker loop (the pause doubles up to this).
_MAX_ERROR_PAUSE_S = 5.0


@dataclass
class RunnerStats:
    """What this runner did, counted under its lock (reports, tests, the trace footer)."""

    claimed: int = 0
    completed: int = 0
    discarded: int = 0  # late results that lost the race to a cancel, timeout or release
    expired: int = 0  # moves made by this runner's watchdog
    released: int = 0  # RUNNING tasks handed back to PENDING at shutdown


def default_worker_id() -> str:
    """host:pid, so an operator can tell which process holds a task."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Runner:
    """Runs an App's task functions from a Store with worker threads (see module doc)."""

    def __init__(
        self,
        app: App,
        store: Store,
        *,
        workers: int = 4,
        worker_id: str | None = None,
        sinks: Iterable[EventSink] = (),
        poll_s: float | None = None,
        watchdog_s: float = 1.0,
        heartbeat_s: float | None = None,
        trace: str | os.PathLike[str] | None = None,
        trace_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self.app = app
        self.store = store
        self.workers = workers
        self.worker_id = worker_id or default_worker_id()
        self.clock = clock
        self.lock = threading.Lock()
        #: Fleet-scoped downstream fuses by name; built first so a store that cannot hold
        #: them is refused before anything starts.
        self.fleet: dict[str, FleetLimits] = app.fleet_limits(store)
        self.scheduler: Scheduler = app.scheduler(store, sinks=sinks, now=clock())
        self.stats = RunnerStats()
        # In-process store: every change goes through this runner, so waits need no bound.
        # Durable store: other processes write too; a listener thread turns the store's
        # wait_for_work into wake-ups, and waits are bounded as a safety net (poll_s).
        self._local = isinstance(store, MemoryStore)
        self._listen = not self._local and callable(getattr(store, "wait_for_work", None))
        if poll_s is None and not self._local:
            poll_s = _LISTEN_BOUND_S if self._listen else _POLL_S
        self._poll_s = poll_s
        self._watchdog_s = watchdog_s
        lease = app.config.lease_s
        self._heartbeat_s = heartbeat_s or (lease / 3 if lease else 10.0)
        for ds in app.downstreams.values():  # held fleet permits are renewed by the heartbeat
            if ds.fleet:
                self._heartbeat_s = min(self._heartbeat_s, ds.lease_s / 3)
        self._trace_path = Path(trace) if trace is not None else None
        self._trace_interval_s = trace_interval_s
        self._tracer: Any = None
        self._work_cond = threading.Condition(self.lock)
        self._watch_cond = threading.Condition(self.lock)
        self._beat_cond = threading.Condition(self.lock)
        self._done_cond = threading.Condition(self.lock)
        # Keyed by attempt (task_id, version): a stale attempt that ignores its stop and the
        # retry of the same task can both be running here.
        self._running: dict[Attempt, TaskContext] = {}
        self._permits: dict[Attempt, Any] = {}
        self._idle = 0
        self._joins: list[str | None] = []
        self._watchdog_due = float("inf")
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        self._started = False
        self._stopping = False
        self._closed = False

    def __repr__(self) -> str:
        return f"Runner(worker_id={self.worker_id!r}, workers={self.workers}, app={self.app!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Runner:
        """Start the worker, watchdog and heartbeat threads (and the trace, if asked)."""
        if self._started:
            raise RuntimeError("runner already started")
        self._started = True
        if self._trace_path is not None:
            from taskfuse.runtime.tracing import RuntimeTrace

            self._tracer = RuntimeTrace(self, self._trace_path, self._trace_interval_s)
        for i in range(self.workers):
            wid = f"{self.worker_id}/{i}"
            self._workers.append(self._spawn(self._work, f"taskfuse-worker-{i}", wid))
        self._threads.append(self._spawn(self._watch, "taskfuse-watchdog"))
        self._threads.append(self._spawn(self._beat, "taskfuse-heartbeat"))
        if self._listen:  # not joined at shutdown: it may sit in the store's wait a while
            self._spawn(self._listen_loop, "taskfuse-listener")
        if self._tracer is not None:
            self._threads.append(self._spawn(self._tracer.run, "taskfuse-trace"))
        return self

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        # Daemon threads: a task that never returns must not keep the process alive.
        thread = threading.Thread(target=target, name=name, args=args, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def request_stop(self) -> None:
        """Stop claiming new tasks (the first step of a graceful shutdown); returns at once."""
        with self.lock:
            self._stopping = True
            self._work_cond.notify_all()

    def shutdown(self, grace_s: float = 10.0) -> list[Task]:
        """Stop claiming, give running tasks `grace_s` to finish, release the rest to PENDING.

        Returns the released records. Tasks still running are told to stop; whatever they
        return later is discarded by the version check. Safe to call more than once.
        """
        self.request_stop()
        deadline = time.monotonic() + grace_s
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        released = self._release_running()
        with self.lock:
            self._closed = True
            self._watch_cond.notify_all()
            self._beat_cond.notify_all()
            self._done_cond.notify_all()
        if self._tracer is not None:
            self._tracer.close()
            self._tracer = None
        for thread in self._threads:
            thread.join(timeout=2.0)
        return released

    def _release_running(self) -> list[Task]:
        released = []
        with self.lock:
            now = self.clock()
            for ctx in list(self._running.values()):
                try:
                    new = self.scheduler.release(ctx.task, now)
                except Exception:
                    log.exception("could not release task %s at shutdown", ctx.task.task_id,
                                  extra=task_extra(ctx.task))
                    new = None
                if new is not None:
                    released.append(new)
                    self.stats.released += 1
                self._stop_task(ctx.task.task_id)
            if released:
                self._changed()
        for task in released:
            log.info("released task %s back to PENDING (shutdown)", task.task_id,
                     extra=task_extra(task))
        return released

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def is_local(self) -> bool:
        """Whether the store lives in this process (MemoryStore): no one else changes it."""
        return self._local

    def store_lock(self) -> AbstractContextManager[Any]:
        """The lock around a call that touches only the store (is_cancelled, heartbeat).

        MemoryStore needs the runner's lock; durable stores are thread-safe (a connection per
        thread, or a pool), so a task polling `ctx.cancelled()` never queues behind a commit.
        """
        return self.lock if self._local else nullcontext()

    # -- submitting and operator actions ---------------------------------------------------

    def spec(self, kind: str, payload: Any = None, **fields: Any) -> TaskSpec:
        """A TaskSpec of a registered kind with its registered defaults (see App.spec)."""
        return self.app.spec(kind, payload, **fields)

    def submit(self, kind: str, payload: Any = None, **fields: Any) -> Task:
        """Submit one task of a registered kind; a duplicate idempotency_key returns the old."""
        spec = self.app.spec(kind, payload, **fields)
        with self.lock:
            task = self.scheduler.submit(spec, self.clock())
            self._wake(1)
        return task

    def submit_many(self, specs: Sequence[TaskSpec], batch_id: str | None = None) -> list[Task]:
        """Submit tasks at once (they may form a DAG); all or nothing."""
        for spec in specs:
            self.app.definition(spec.kind)
        with self.lock:
            tasks = self.scheduler.submit_many(specs, self.clock(), batch_id=batch_id)
            self._wake(len(tasks))
        return tasks

    def submit_batch(
        self, specs: Sequence[TaskSpec], batch_id: str, cap: int | None = None
    ) -> list[Task]:
        """Submit a batch whose tasks run at most `cap` at a time."""
        for spec in specs:
            self.app.definition(spec.kind)
        with self.lock:
            tasks = self.scheduler.submit_batch(specs, self.clock(), batch_id, cap)
            self._wake(len(tasks))
        return tasks

    def cancel(self, task_id: str, reason: str = "canceled") -> Task | None:
        """Cancel a PENDING or RUNNING task; a running attempt here is told to stop."""
        with self.lock:
            task = self.scheduler.cancel(task_id, self.clock(), reason)
            if task is not None:
                self._stop_task(task_id)
                self._changed()
        return task

    def cancel_batch(self, batch_id: str, reason: str = "batch canceled") -> int:
        """Cancel every unfinished task of a batch; returns how many moved."""
        with self.lock:
            running = [t.task_id for t in self.store.batch_tasks(batch_id, _UNFINISHED)]
            n = self.scheduler.cancel_batch(batch_id, self.clock(), reason)
            for task_id in running:
                self._stop_task(task_id)
            self._changed()
        return n

    def get(self, task_id: str) -> Task | None:
        """The stored record of a task (None if unknown)."""
        with self.store_lock():
            return self.store.get(task_id)

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """Tasks per status in the store (of one batch, or of all)."""
        with self.store_lock():
            return self.store.counts(batch_id)

    def join(self, timeout: float | None = None, batch_id: str | None = None) -> bool:
        """Wait until no task (of `batch_id`, or at all) is PENDING or RUNNING.

        Returns False if `timeout` passed first. Tasks waiting out a backoff count as
        unfinished, so this also waits for their retries.
        """
        end = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            self._joins.append(batch_id)
            try:
                while not self._settled(batch_id):
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    if self._closed:
                        return self._settled(batch_id)
                    self._done_cond.wait(_min(left, None if self._local else _POLL_S))
                return True
            finally:
                self._joins.remove(batch_id)

    def _settled(self, batch_id: str | None) -> bool:
        counts = self.store.counts(batch_id)
        return not (counts.get(TaskStatus.PENDING) or counts.get(TaskStatus.RUNNING))

    # -- notifications (all called with the lock held) -------------------------------------

    def _wake(self, n: int) -> None:
        if self._idle and n:
            self._work_cond.notify(n)

    def _changed(self) -> None:
        """Something moved that may make a task claimable or a join finish.

        One idle worker is woken, not all: if it finds work it passes the baton to the next
        (see `_work`), so a completion never stampedes a thousand idle threads into claims
        that find nothing.
        """
        if self._idle:
            self._work_cond.notify(1)
        # Counting is a dict copy in memory but a query on a database: joins on a durable
        # store re-check on a bounded wait instead of after every completion.
        if self._joins and self._local and any(self._settled(b) for b in set(self._joins)):
            self._done_cond.notify_all()

    def work_changed(self) -> None:
        """Public form of `_changed` for the context (lock held): e.g. a breaker closed."""
        self._changed()

    def _stop_task(self, task_id: str) -> None:
        """Stop every attempt of `task_id` running here (all but the current one are stale)."""
        for key in [k for k in self._running if k[0] == task_id]:
            self._running[key].signal_stop()
            permit = self._permits.get(key)
            if permit is not None and permit.event is not None:
                permit.event.set()

    def permit_waiting(self, task: Task, permit: Any) -> None:
        """An attempt is queued on a bulkhead (lock held): a stop must wake it too."""
        self._permits[attempt_of(task)] = permit

    def permit_done(self, task: Task) -> None:
        self._permits.pop(attempt_of(task), None)

    def grant(self, woken: Iterable[Any]) -> None:
        """Wake the bulkhead waiters the core handed a permit to (lock held)."""
        for permit in woken:
            permit.granted = True
            if permit.event is not None:
                permit.event.set()

    def emit(self, event: Event) -> None:
        """Send an event to the scheduler's sinks (lock held)."""
        if self.scheduler.emit.sinks:
            self.scheduler.emit(event)

    def emit_wait(self, task: Task, subject: str, seconds: float, now: float) -> None:
        self.emit(Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id, None,
                        None, "bulkhead", task.attempt, task.worker_id, subject, seconds))

    # -- the worker ------------------------------------------------------------------------

    def _work(self, worker_id: str) -> None:
        """Claim, run, complete; the completion and the next claim share one lock hold."""
        ctx: TaskContext | None = None
        outcome: Outcome | None = None
        pause = 0.0
        while True:
            lost = None
            with self.lock:
                if ctx is not None:
                    lost = self._finish(ctx, outcome)  # type: ignore[arg-type]
                    ctx = None
                if self._stopping:
                    return
                try:
                    answer: Work | Idle | None = self.scheduler.claim(worker_id, self.clock())
                except Exception:
                    log.exception("claim failed; retrying")
                    answer = None
                if isinstance(answer, Work):
                    ctx = self._enter(answer.tasks[0])
                    pause = 0.0
                    if self._idle:  # pass the baton: more may be claimable
                        self._work_cond.notify(1)
                else:
                    pause = self._idle_wait(answer, pause)
            if lost is not None:
                lost[0].logger.info("late result discarded: the task is %s now", lost[1])
            if ctx is not None:
                outcome = self._execute(ctx)

    def _idle_wait(self, answer: Idle | None, pause: float) -> float:
        """Wait (lock held, released while waiting) for work; returns the next error pause."""
        if answer is None:  # the store failed: back off, doubling, up to a bound
            pause = min(_MAX_ERROR_PAUSE_S, max(0.05, pause * 2))
            timeout: float | None = pause
        else:
            pause = 0.0
            timeout = self._poll_s
            if answer.until is not None:
                timeout = _min(timeout, max(0.0, answer.until - self.clock()))
        self._idle += 1
        try:
            self._work_cond.wait(timeout)
        finally:
            self._idle -= 1
        return pause

    def _enter(self, task: Task) -> TaskContext:
        """Register a claimed task as running here (lock held)."""
        ctx = TaskContext(task, self)
        self._running[attempt_of(task)] = ctx
        self.stats.claimed += 1
        deadline = task.deadline
        if deadline is not None and deadline + _DEADLINE_SLACK_S < self._watchdog_due:
            self._watch_cond.notify()
        return ctx

    def _execute(self, ctx: TaskContext) -> Outcome:
        """Run the user's function, outside the lock; any exception becomes a failure."""
        task = ctx.task
        try:
            fn = self.app.definition(task.kind).fn
            return Outcome.success(fn(ctx, task.payload))
        except Exception as exc:
            outcome = outcome_of(exc)
            if isinstance(exc, TaskError):
                ctx.logger.info("attempt failed: %s", exc)
            else:
                ctx.logger.warning("attempt failed: %r", exc, exc_info=exc)
            return outcome

    def _finish(self, ctx: TaskContext, outcome: Outcome) -> tuple[TaskContext, str] | None:
        """Apply an attempt's outcome (lock held); answers what to log if it was discarded."""
        task = ctx.task
        self._running.pop(attempt_of(task), None)
        answer = self._complete(task, outcome)
        self._changed()
        if isinstance(answer, LostRace):
            self.stats.discarded += 1
            current = answer.current
            return ctx, current.status.value if current is not None else "gone"
        if answer is not None:
            self.stats.completed += 1
        return None

    def _complete(self, task: Task, outcome: Outcome) -> Completed | LostRace | None:
        """complete(), and when the store refuses the result itself, record that failure."""
        try:
            return self.scheduler.complete(task, outcome, self.clock())
        except Exception as exc:
            log.exception("could not store the outcome of task %s", task.task_id,
                          extra=task_extra(task))
            failure = Outcome.failure(RESULT_ERROR, f"outcome could not be stored: {exc}")
            try:
                return self.scheduler.complete(task, failure, self.clock())
            except Exception:
                log.exception("could not store the failure of task %s either", task.task_id,
                              extra=task_extra(task))
                return None

    # -- the watchdog, the heartbeat, the listener -----------------------------------------

    def _watch(self) -> None:
        with self.lock:
            while not self._closed:
                now = self.clock()
                try:
                    moved = self.scheduler.expire(now)
                    nxt = self.store.next_deadline()
                except Exception:
                    log.exception("watchdog pass failed")
                    moved, nxt = [], None
                self._expired(moved)
                wait = self._watchdog_s
                if nxt is not None:
                    wait = min(wait, max(0.0, nxt - now) + _DEADLINE_SLACK_S)
                self._watchdog_due = now + wait
                self._watch_cond.wait(wait)

    def _expired(self, moved: list[Task]) -> None:
        if not moved:
            return
        for task in moved:
            self.stats.expired += 1
            self._stop_task(task.task_id)
            log.info("watchdog: task %s %s (%s)", task.task_id, task.status.value,
                     task.error_msg, extra=task_extra(task))
        self._changed()

    def _beat(self) -> None:
        while True:
            with self.lock:
                self._beat_cond.wait(self._heartbeat_s)
                if self._closed:
                    return
                running = list(self._running.values())
            now = self.clock()
            with self.store_lock():
                lost = [ctx for ctx in running if not self._renew(ctx, now)]
            self._renew_permits()
            if lost:
                with self.lock:
                    for ctx in lost:
                        ctx.signal_stop()

    def _renew(self, ctx: TaskContext, now: float) -> bool:
        try:
            return self.scheduler.heartbeat(ctx.task, now)
        except Exception:
            log.exception("heartbeat of task %s failed", ctx.task.task_id,
                          extra=task_extra(ctx.task))
            return True  # unknown: keep running; the lease decides if it was really lost

    def _renew_permits(self) -> None:
        """Keep the fleet permits of calls in progress here from lapsing while we are alive."""
        for limits in self.fleet.values():
            if limits.bulkhead is None:
                continue
            try:
                lost = limits.renew_all()
            except Exception:
                log.exception("renewing fleet permits of %r failed", limits.name)
                continue
            if lost:
                log.warning("%d fleet permit(s) of downstream %r lapsed before renewal",
                            lost, limits.name)

    def _listen_loop(self) -> None:
        wait_for_work = self.store.wait_for_work  # type: ignore[attr-defined]
        while not self._closed:
            try:
                woke = wait_for_work(_LISTEN_BOUND_S)
            except Exception:
                if self._closed:  # the store was closed after our shutdown: done
                    return
                log.exception("waiting for work notifications failed")
                time.sleep(1.0)
                continue
            if woke:
                with self.lock:
                    self._changed()

    # -- reading for the trace and reports -------------------------------------------------

    def running_tasks(self) -> list[Task]:
        """Tasks running in this runner now (lock held by the caller or not needed)."""
        return [ctx.task for ctx in list(self._running.values())]


def task_extra(task: Task) -> dict[str, str]:
    """The `extra` of a runner log line about a task: every line of a task has its trace_id."""
    return {"task_id": task.task_id, "trace_id": task.trace_id}


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
