"""The threaded runner: the core Scheduler driven in real time, at the speed of its store.

Theory of operation
-------------------
The runner is an interpreter of the core's answers; it never decides a delay, a limit or a
next status. What it adds is plumbing that keeps the store busy rather than waiting on it:

* a **claimer** thread claims ready tasks in groups: as many as the free worker threads plus
  a prefetch (adaptive, and at least claim_batch - 1 per thread when the limits say so;
  outcomes waiting for their commit count against the prefetch only beyond it,
  so a claim and a commit are in flight at once: `Attempts.want`), never a task whose
  downstream's bulkhead is already full of tasks held here (its size, plus a prefetch
  while tasks are short), nor more at once than the fullest bulkhead has room for
  (`_bulkhead_room`), nor one whose previous attempt
  is still stuck on a thread here. Idle, it waits for a
  submit, a completion, the store's notification (`wait_for_work`) or the core's next due
  time (`Idle.until`).
* N **worker** threads take claimed attempts from the buffer and run them (in the thread,
  or in a task process for kinds with executor="process"), then hand the outcome over.
* a **completer** thread commits outcomes in groups: those that arrived while the previous
  group was being written, or within `group_wait_s` while other workers are busy, go to the
  store in one transaction (`Scheduler.complete_many`: one round trip, version checks in the
  statement). An outcome is acknowledged only once committed. If the worker process dies
  between a task's end and that commit, the task's lease lapses and it runs again (at least
  once, as with any queue): the window is one group, at most `group_wait_s` plus a commit.
  If the store is down, outcomes are kept and written when it answers, never turned into
  failures; the heartbeat keeps their leases alive meanwhile.
* a **watchdog** at the core's next deadline (`expire`, `watchdog_wait`), a **heartbeat**
  renewing every held attempt's lease in one statement (`heartbeat_many`) and the fleet
  permits, and with a durable store a **listener** for the store's wake-ups.

Locks. `lock` (re-entrant) is the fuse lock: the Scheduler's decisions (rng, budget,
breakers) and the DownstreamCall's admissions hold it, briefly, and never across a store
call or user code. A MemoryStore is shared through `LockedStore` under the same lock; a
durable store needs none, so the database round trips of the claimer, the completer, the
watchdog and the task threads overlap. The runner's own bookkeeping (`Attempts`) has its
lock `attempts.mu`, taken inside `lock` at most, never around it. Events
reach the sinks one at a time under a lock of their own.

Stopping a running task is cooperative: a cancel, a timeout, a lost lease or a release at
shutdown sets the attempt's stop signal (seen by `ctx.cancelled()` and `ctx.sleep()`), and
whatever it returns later loses the version check and is discarded. A thread that ignores
the signal is "stuck": after `stuck_after_s` it no longer counts as capacity, and a new
thread replaces it as long as at most `stuck_threads_max` are stuck (default: as many as
the workers), so a hang storm cannot start more than workers + stuck_threads_max threads;
a stuck thread that returns to a full pool retires (the lab models the same rule). A kind
registered with executor="process" runs in a task process instead, killed on that signal
(`taskfuse.runtime.procexec`), so a hung task cannot keep its thread at all.
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

from taskfuse.core import reopen
from taskfuse.core.capacity import claim_room, replaces_stuck, retires_on_return
from taskfuse.core.events import Event, EventKind, EventSink, thread_wait
from taskfuse.core.reopen import RetryResult
from taskfuse.core.retry import ErrorKind
from taskfuse.core.scheduler import DEADLINE_SLACK_S, Completed, LostRace, Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import Store, WorkerBeat
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.runtime import waiting
from taskfuse.runtime.aio import AsyncExecutor, AsyncTaskContext, LoopRoom
from taskfuse.runtime.app import App
from taskfuse.runtime.attempts import AttemptKey, Attempts, Stuck, key_of
from taskfuse.runtime.calls import REAL_WAITS, CallClient, Waits
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.errors import RESULT_ERROR, attempt_failure
from taskfuse.runtime.fleet import FleetLimits
from taskfuse.runtime.logs import TaskOutput
from taskfuse.runtime.pools import PoolSection
from taskfuse.runtime.procexec import ProcessPool
from taskfuse.runtime.schedules import schedule_role
from taskfuse.runtime.waiting import WaitResult
from taskfuse.store import StoreError, StoreFull, StoreUnavailable, bounded
from taskfuse.store.memory import LockedStore, MemoryStore

log = logging.getLogger("taskfuse.runtime")

_UNFINISHED = (TaskStatus.PENDING, TaskStatus.RUNNING)
#: Bound of idle waits on a durable store: without notifications, and with them (a net).
_POLL_S = 0.25
_LISTEN_BOUND_S = 1.0
#: How often `wait_settled` looks whether every worker thread waits for work.
_SETTLE_POLL_S = 0.005
#: How often a join whose runner has nothing in flight asks the store whether other
#: processes' tasks are done: one index probe. At 0.25 s, a fleet of two processes draining
#: 20k tasks in 0.8 s spent up to a third more waiting to notice the other had finished.
_JOIN_POLL_S = 0.05
#: Longest pause after a store error in a claim or commit loop (the pause doubles up to it).
_MAX_ERROR_PAUSE_S = 1.0
#: How long shutdown waits, past the grace, for threads whose task processes it killed, and
#: at least for the last commit.
_AFTER_KILL_S = 1.5
#: Largest group a claim or a commit takes at once.
_MAX_GROUP = 256
#: Tasks claimed ahead per worker thread at most, while tasks are short (the prefetch shrinks
#: to none as they get long: `Attempts.prefetch_now`).
_PREFETCH_PER_THREAD = 32


@dataclass
class RunnerStats:
    """What this runner did (reports, tests, the trace footer); counted under attempts.mu."""

    claimed: int = 0
    completed: int = 0
    #: attempts of ours that ended in an error: failed outcomes committed, ours timed out
    failed: int = 0
    discarded: int = 0  # late results that lost the race to a cancel, timeout or release
    expired: int = 0  # moves made by this runner's watchdog
    released: int = 0  # RUNNING tasks handed back to PENDING at shutdown
    groups: int = 0  # commit groups written
    replaced: int = 0  # stuck worker threads replaced by new ones
    retired: int = 0  # stuck threads that returned to a full pool and ended


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
        watchdog_s: float | None = None,
        heartbeat_s: float | None = None,
        trace: str | os.PathLike[str] | None = None,
        trace_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        waits: Waits = REAL_WAITS,
        prefetch: int | None = None,
        group_wait_s: float = 0.002,
        stuck_after_s: float = 1.0,
        stuck_threads_max: int | None = None,
        async_concurrency: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self.app = app
        self.workers = workers
        self.worker_id = worker_id or default_worker_id()
        self.clock = clock
        #: The fuse lock (module doc): decisions and admissions, never I/O.
        self.lock = threading.RLock()
        self._local = isinstance(store, MemoryStore)
        self.store: Any = LockedStore(store, self.lock) if self._local else store
        #: Fleet-scoped downstream fuses by name; built first so a store that cannot hold
        #: them is refused before anything starts.
        self.fleet: dict[str, FleetLimits] = app.fleet_limits(store)
        self.scheduler: Scheduler = app.scheduler(self.store, sinks=sinks, now=clock())
        self.scheduler.serialize(self.lock, threading.Lock())
        #: This runner's per-call clients and pool sections (ctx.downstream().call, ctx.pool),
        #: and how the call path measures and waits (a fake clock in tests).
        self.clients: dict[str, CallClient] = app.call_clients()
        self.pools: dict[str, PoolSection] = app.pool_sections()
        self.waits = waits
        self.stats = RunnerStats()
        if prefetch is None:  # short tasks: enough to hide a claim's round trip; long ones:
            prefetch = min(_MAX_GROUP, _PREFETCH_PER_THREAD * workers)  # see Attempts.run_s
        self.attempts = Attempts(workers, prefetch, app.limits.claim_batch - 1)
        self.stuck_after_s = stuck_after_s
        if stuck_threads_max is None:  # the limits' bound, else as many as the threads
            limits = app.limits
            stuck_threads_max = (limits.stuck_threads_max
                                 if limits.stuck_threads_max is not None else workers)
        self.stuck_threads_max = stuck_threads_max
        self._group_wait_s = group_wait_s
        #: Task processes of kinds with executor="process", started (and their functions
        #: imported) by `start` before the first claim.
        self.procs = ProcessPool(workers, preload=app.process_functions())
        self._listen = not self._local and callable(getattr(store, "wait_for_work", None))
        if poll_s is None and not self._local:
            poll_s = _LISTEN_BOUND_S if self._listen else _POLL_S
        self._poll_s = poll_s
        self._watchdog_s = watchdog_s or app.limits.watchdog_interval_s
        self._heartbeat_s = heartbeat_s or app.heartbeat_s  # leases and fleet permits
        self._trace_path = Path(trace) if trace is not None else None
        self._trace_interval_s = trace_interval_s
        self._tracer: Any = None
        self._claim_wake = threading.Event()
        self._closing = threading.Event()
        self._watch_mu = threading.Condition(threading.Lock())
        self._watchdog_due = float("inf")
        #: The soonest deadline claimed since the watchdog last asked the store (`_watch`).
        self._sooner = float("inf")
        self._permits: dict[AttemptKey, Any] = {}
        self._thread_of: dict[AttemptKey, str] = {}
        #: Kinds whose retries may run beside a stuck earlier attempt (kinds.KIND.overlap).
        self._overlap = frozenset(k for k, v in app.limits.kinds.items() if v.overlap)
        #: Each kind's executor as the limits place it (a bad placement is refused here);
        #: kinds of the async executor run on an event loop thread (`runtime.aio`).
        self._executor_of = {kind: app.definition(kind).executor for kind in app.tasks}
        self._thread_kinds = any(e != "async" for e in self._executor_of.values()) \
            or not self._executor_of
        self.aio: AsyncExecutor | None = None
        self.loop_room = LoopRoom(0, {})
        if "async" in self._executor_of.values():
            self._start_loop_later(async_concurrency)
        self._threads: list[threading.Thread] = []
        self._workers: list[threading.Thread] = []
        self._committer: threading.Thread | None = None
        self._started = False
        self._started_at = 0.0
        #: The claimer's last claim found nothing (or it has not started): only then does a
        #: join ask the store whether anything is left.
        self._claimer_idle = True
        self._stopping = False
        #: Tasks a claim in flight brought after the stop, released by the claimer itself.
        self._released_late: list[Task] = []
        self._closed = False
        #: Set while the store refuses to grow (`StoreFull`): said once, not per retry.
        self.store_full: StoreFull | None = None
        self._full_mu = threading.Lock()

    def __repr__(self) -> str:
        return f"Runner(worker_id={self.worker_id!r}, workers={self.workers}, app={self.app!r})"

    def _start_loop_later(self, async_concurrency: int | None) -> None:
        """The event loop of the async kinds and its room (the limits' caps); started by
        `start`."""
        limits = self.app.limits
        caps = {kind: (k.async_concurrency if (k := limits.kinds.get(kind)) else None)
                for kind, e in self._executor_of.items() if e == "async"}
        self.loop_room = LoopRoom(async_concurrency or limits.async_concurrency, caps)
        #: Free slots on the loop that wake the claimer: a claim round trip per ended
        #: coroutine cost a store query per task at thousands of tasks a second.
        self._loop_wake_at = max(1, min(_MAX_GROUP // 8, self.loop_room.free() // 16))
        self.aio = AsyncExecutor(self, lambda kind: self.app.definition(kind).fn, caps,
                                 self.emit, self.clock, self.worker_id)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Runner:
        """Start the claimer, workers, completer, watchdog and heartbeat (and the trace);
        first the task processes of process kinds, their functions imported (a function no
        process can import raises RuntimeConfigError, and nothing was claimed)."""
        if self._started:
            raise RuntimeError("runner already started")
        if self.procs.preload:  # a task's timeout runs from its claim: import before one
            self.procs.warm()
        schedules = schedule_role(self, self._closing)  # an unknown kind: refused here
        self._started = True
        self._started_at = self.clock()
        if self.aio is not None:
            self.aio.start()
        if self._trace_path is not None:
            from taskfuse.runtime.tracing import RuntimeTrace

            self._tracer = RuntimeTrace(self, self._trace_path, self._trace_interval_s)
        with self.attempts.mu:
            for _ in range(self.workers):
                self._add_worker()
        self._committer = self._spawn(self._commit_loop, "taskfuse-completer")
        self._threads.append(self._spawn(self._claim_loop, "taskfuse-claimer"))
        self._threads.append(self._spawn(self._watch, "taskfuse-watchdog"))
        self._threads.append(self._spawn(self._beat, "taskfuse-heartbeat"))
        if schedules is not None:
            self._threads.append(self._spawn(schedules.run, "taskfuse-schedules"))
        if self._listen:  # not joined at shutdown: it may sit in the store's wait a while
            self._spawn(self._listen_loop, "taskfuse-listener")
        if self._tracer is not None:
            self._threads.append(self._spawn(self._tracer.run, "taskfuse-trace"))
        return self

    def wait_settled(self, timeout: float) -> bool:
        """Wait until every worker thread is up and waiting for work, so a task submitted
        now starts at once; False if that took longer than `timeout`. `start` returns once
        the threads exist; with thousands of them, they take a moment more to get there (a
        load test's time zero waits for this, or its first arrivals would queue behind it)."""
        deadline = time.monotonic() + timeout
        at = self.attempts
        while True:
            with at.mu:
                if at.waiting >= at.live_threads:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_SETTLE_POLL_S)

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        # Daemon threads: a task that never returns must not keep the process alive.
        thread = threading.Thread(target=target, name=name, args=args, daemon=True)
        thread.start()
        return thread

    def _add_worker(self) -> None:
        """One more worker thread that counts as capacity (attempts.mu held)."""
        self.attempts.live_threads += 1
        name = f"taskfuse-worker-{len(self._workers)}"
        self._workers.append(self._spawn(self._work, name))

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def request_stop(self) -> None:
        """Stop claiming new tasks (the first step of a graceful shutdown); returns at once."""
        at = self.attempts
        with at.mu:
            self._stopping = True
            at.work.notify_all()
        self._claim_wake.set()

    def shutdown(self, grace_s: float = 10.0) -> list[Task]:
        """Stop claiming, give running tasks `grace_s` to finish, release the rest to PENDING.

        Claimed tasks no thread started go back at once. Returns the released records.
        Outcomes already produced are committed (bounded by the grace). Tasks still running
        are told to stop; whatever they return later is discarded by the version check.
        Safe to call more than once.
        """
        self.request_stop()
        deadline = time.monotonic() + grace_s
        hard = deadline + _AFTER_KILL_S  # past the grace: kills, releases, the last commit
        with bounded(self.store, grace_s):  # a store that is down must not hold us past it
            released = self._release(self._take_buffer(), "shutdown")
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._wait_loop_idle(deadline)
        with self.attempts.mu:
            running = [*self.attempts.running.values(), *self.attempts.aio.values()]
        with bounded(self.store, max(0.1, (hard - time.monotonic()) / 2)):
            released += self._release(running, "shutdown")
        self.procs.close()  # after the release: a killed attempt must not count as failed
        for thread in self._workers:  # threads of killed task processes return now
            thread.join(max(0.0, hard - time.monotonic()) / 2)
        if self.aio is not None:  # released coroutines were canceled: they end at once
            self._wait_loop_idle(hard)
        self._drain_commits(max(0.1, hard - time.monotonic()))
        if self.aio is not None:
            self.aio.close(max(0.1, hard - time.monotonic()))
        if self._started:
            with bounded(self.store, max(0.1, hard - time.monotonic())):
                self._beat_worker(stopped=True)
        with self.attempts.mu:
            self._closed = True
            self.attempts.outcomes.notify_all()
            self.attempts.settled.notify_all()
        self._closing.set()
        self._claim_wake.set()
        with self._watch_mu:
            self._watch_mu.notify_all()
        if self._tracer is not None:
            self._tracer.close()
            self._tracer = None
        end = max(time.monotonic() + 0.2, hard)  # a thread inside a store call that does
        for thread in [*self._threads, *([self._committer] if self._committer else [])]:
            thread.join(max(0.0, end - time.monotonic()))  # not answer is left to its end
        with self.attempts.mu:
            late, self._released_late = self._released_late, []
        # A claim in flight when the stop came may have taken a task this shutdown had just
        # released, and released it again: each task once, as it was last released.
        return list({task.task_id: task for task in released + late}.values())

    def _wait_loop_idle(self, until: float) -> None:
        """Wait until no attempt is on the event loop, or the monotonic time `until`."""
        at = self.attempts
        with at.mu:
            while at.aio and time.monotonic() < until:
                at.loop_idle.wait(max(0.0, until - time.monotonic()))

    def _take_buffer(self) -> list[TaskContext]:
        at = self.attempts
        with at.mu:
            taken = list(at.buffer)
            at.buffer.clear()
            at.work.notify_all()
        return taken

    def _release(self, contexts: list[TaskContext], reason: str) -> list[Task]:
        """Hand attempts back to PENDING (no attempt used) and tell them to stop."""
        released = []
        now = self.clock()
        for ctx in contexts:
            try:
                new = self.scheduler.release(ctx.task, now, reason)
            except Exception as exc:
                if not self._said_full(exc):
                    log.exception("could not release task %s at shutdown (its lease will "
                                  "lapse)", ctx.task.task_id, extra=task_extra(ctx.task))
                new = None
            self._stop_task(ctx.task.task_id)
            if new is not None:
                released.append(new)
                log.info("released task %s back to PENDING (%s)", new.task_id, reason,
                         extra=task_extra(new))
        with self.attempts.mu:
            self.stats.released += len(released)
        if released:
            self._claim_wake.set()
        return released

    def _drain_commits(self, timeout: float) -> None:
        """Wait for the completer to write what is outstanding, at most `timeout`; after an
        earlier shutdown (the completer gone), write it here."""
        end = time.monotonic() + timeout
        at = self.attempts
        if self._committer is not None and not self._committer.is_alive():
            with at.mu:
                group = list(at.committing.values())
            if group:
                try:
                    with bounded(self.store, timeout):
                        self._committed(group, self._write(group))
                except Exception:
                    log.exception("could not write %d outcome(s) at shutdown", len(group))
        with at.mu:
            at.outcomes.notify_all()
            while at.committing and time.monotonic() < end and self.store_full is None:
                at.settled.wait(max(0.0, min(0.1, end - time.monotonic())))
            if at.committing:
                log.warning("%d outcome(s) not written at shutdown (the store did not answer); "
                            "their tasks run again when their leases lapse", len(at.committing))

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def is_local(self) -> bool:
        """Whether the store lives in this process (MemoryStore): no one else changes it."""
        return self._local

    def store_lock(self) -> AbstractContextManager[Any]:
        """Kept for callers of the former API: store calls need no lock of the caller's (a
        MemoryStore is locked by its wrapper, durable stores are thread-safe)."""
        return nullcontext()

    # -- submitting and operator actions ---------------------------------------------------

    def spec(self, kind: str, payload: Any = None, **fields: Any) -> TaskSpec:
        """A TaskSpec of a registered kind with its registered defaults (see App.spec)."""
        return self.app.spec(kind, payload, **fields)

    def submit(self, kind: str, payload: Any = None, **fields: Any) -> Task:
        """Submit one task of a registered kind; a duplicate idempotency_key returns the old."""
        spec = self.app.spec(kind, payload, **fields)
        [task] = self.app.submit_to(self.scheduler, [spec], self.clock())
        self._claim_wake.set()
        return task

    def submit_many(self, specs: Sequence[TaskSpec], batch_id: str | None = None) -> list[Task]:
        """Submit tasks at once (they may form a DAG); all or nothing. A batch named in the
        app's limits gets its cap and defaults (App.submit_to)."""
        for spec in specs:
            self.app.definition(spec.kind)
        tasks = self.app.submit_to(self.scheduler, specs, self.clock(), batch_id)
        self._claim_wake.set()
        return tasks

    def submit_batch(
        self, specs: Sequence[TaskSpec], batch_id: str, cap: int | None = None
    ) -> list[Task]:
        """Submit a batch whose tasks run at most `cap` (default: the limits') at a time."""
        for spec in specs:
            self.app.definition(spec.kind)
        tasks = self.app.submit_to(self.scheduler, specs, self.clock(), batch_id, cap=cap,
                                   new_batch=True)
        self._claim_wake.set()
        return tasks

    def cancel(self, task_id: str, reason: str = "canceled") -> Task | None:
        """Cancel a PENDING or RUNNING task; a running attempt here is told to stop."""
        task = self.scheduler.cancel(task_id, self.clock(), reason)
        if task is not None:
            self._stop_task(task_id)
            self._changed()
        return task

    def cancel_batch(self, batch_id: str, reason: str = "batch canceled") -> int:
        """Cancel every unfinished task of a batch; returns how many moved."""
        live = [t.task_id for t in self.store.batch_tasks(batch_id, _UNFINISHED)]
        n = self.scheduler.cancel_batch(batch_id, self.clock(), reason)
        for task_id in live:
            self._stop_task(task_id)
        self._changed()
        return n

    def retry(self, target: str, **options: Any) -> RetryResult:
        """Put a task's or a batch's ended tasks back to PENDING (`taskfuse.core.reopen.retry`:
        `statuses`, `reset_attempts`, `dry_run`), with the dependents they took down."""
        result = reopen.retry(self.store, target, self.clock(), emit=self.scheduler.emit,
                              **options)
        if result.retried:
            self._changed()
        return result

    def wait(self, target: str, timeout: float | None = None) -> WaitResult:
        """Wait until the task or batch `target` ended (in any process), or `timeout` s
        passed: `taskfuse.runtime.waiting.wait`, woken by the store's notifications."""
        return waiting.wait(self.store, target, timeout)

    def get(self, task_id: str) -> Task | None:
        """The stored record of a task (None if unknown)."""
        return self.store.get(task_id)  # type: ignore[no-any-return]

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """Tasks per status in the store (of one batch, or of all), from the counts the
        store keeps; `join` and the runner itself ask `Scheduler.settled`."""
        return self.store.counts(batch_id)  # type: ignore[no-any-return]

    def join(self, timeout: float | None = None, batch_id: str | None = None) -> bool:
        """Wait until no task (of `batch_id`, or at all) is PENDING or RUNNING.

        Returns False if `timeout` passed first. Tasks waiting out a backoff count as
        unfinished, so this also waits for their retries. Woken by every commit group; asks
        the store only when nothing is in flight here (one index probe), so a join costs
        the store nothing while this runner is busy.
        """
        end = None if timeout is None else time.monotonic() + timeout
        at = self.attempts
        bound = _JOIN_POLL_S
        while True:
            with at.mu:  # busy here, or the claimer still finding work: no need to ask
                busy = (not at.idle(batch_id) or not self._claimer_idle) and not self._closed
                if busy:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    at.settled.wait(_min(left, bound))
                    continue
            if self.scheduler.settled(batch_id):
                return True
            left = None if end is None else end - time.monotonic()
            if self._closed or (left is not None and left <= 0):
                return False
            with at.mu:
                at.settled.wait(_min(left, bound))

    # -- notifications ---------------------------------------------------------------------

    def _changed(self) -> None:
        """Something moved that may make a task claimable or a join finish."""
        self._claim_wake.set()
        at = self.attempts
        with at.mu:
            at.settled.notify_all()

    def work_changed(self) -> None:
        """Tell the claimer that claimable work may have appeared (e.g. a breaker closed).

        Safe to call with the fuse lock held: it takes no lock."""
        self._claim_wake.set()

    def _stop_task(self, task_id: str, only: AttemptKey | None = None) -> None:
        """Tell every attempt of `task_id` held here (or `only` that one) to stop, buffered
        ones too."""
        at = self.attempts
        with at.mu:
            found = at.mark_stopped(task_id, only)
        with self.lock:
            for ctx in found:
                ctx.signal_stop()
            for key in [k for k in self._permits if k[0] == task_id and only in (None, k)]:
                permit = self._permits[key]
                if permit.event is not None:
                    permit.event.set()

    def permit_waiting(self, task: Task, permit: Any) -> None:
        """An attempt is queued on a bulkhead or a pool (fuse lock held): a stop must wake
        it too. Keyed by attempt: a stale attempt and its task's retry may both wait."""
        self._permits[key_of(task)] = permit

    def permit_done(self, task: Task) -> None:
        self._permits.pop(key_of(task), None)

    def grant(self, woken: Iterable[Any]) -> None:
        """Wake the bulkhead waiters the core handed a permit to (fuse lock held)."""
        for permit in woken:
            permit.granted = True
            if permit.event is not None:
                permit.event.set()

    def emit(self, event: Event) -> None:
        """Send an event to the scheduler's sinks."""
        if self.scheduler.emit.sinks:
            self.scheduler.emit(event)

    def emit_wait(self, task: Task, subject: str, seconds: float, now: float) -> None:
        self.emit(Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id, None,
                        None, "bulkhead", task.attempt, task.worker_id, subject, seconds))

    def _emit_thread_wait(self, task: Task) -> None:
        """A prefetched task is RUNNING from its claim but begins only when a thread takes
        it: say how long it waited, so run times count from the start of its code (as in
        the lab, which claims for a free worker only)."""
        now = self.clock()
        waited = now - task.started_at if task.started_at is not None else 0.0
        if waited > 0:
            self.emit(thread_wait(task, now, waited))

    # -- the claimer -----------------------------------------------------------------------

    def _claim_loop(self) -> None:
        """Claim in groups while there is room; idle until woken or the core's due time."""
        at = self.attempts
        pause = 0.0
        while True:
            self._claim_wake.clear()
            with at.mu:
                if self._stopping:
                    self._claimer_idle = True  # claims no more: a join asks the store
                    at.settled.notify_all()
                    return
                want = min(self._want(), _MAX_GROUP)
                exclude = at.excluded(self._overlap) if want > 0 else frozenset()
                full, room = self._bulkhead_room() if want > 0 else (frozenset(), None)
                if room is not None:  # the claim may bring only tasks that call it
                    want = min(want, room)
            if want <= 0:  # every thread busy and the prefetch taken: wait for room
                self._claim_wake.wait(self._poll_s or 1.0)
                continue
            now = self.clock()
            try:
                answer = self.scheduler.claim(self.worker_id, now, want, exclude=exclude,
                                              also_blocked=full)
            except Exception as exc:
                pause = min(_MAX_ERROR_PAUSE_S, max(0.05, pause * 2))
                if not self._said_full(exc):
                    log.exception("claim failed; trying again in %.2fs", pause)
                self._claim_wake.wait(pause)
                continue
            pause = 0.0
            if isinstance(answer, Work):
                with at.mu:
                    wrote_all = not at.committing
                if wrote_all:  # it wrote, and no outcome waits to be written: room again
                    self._not_full()
                self._claimer_idle = False
                self._buffer(answer.tasks)
                continue
            if not self._claimer_idle:
                with at.mu:
                    self._claimer_idle = True  # nothing claimable now: a join may ask
                    at.settled.notify_all()
            wait = self._poll_s
            if answer.until is not None:
                wait = _min(wait, max(0.0, answer.until - self.clock()))
            self._claim_wake.wait(wait)

    def _want(self) -> int:
        """How many attempts a claim may bring now: for the worker threads (their free
        threads and prefetch) and for the event loop (its room) (attempts.mu held). A claim
        cannot choose kinds, so in an app of both, either side may get a few of the other's
        share, waiting RUNNING in its buffer or its kind's queue."""
        want = self.attempts.want() if self._thread_kinds else 0
        if self.aio is not None:
            want = max(0, want) + self.loop_room.free()
        return want

    def _bulkhead_room(self) -> tuple[frozenset[str], int | None]:
        """Downstreams whose bulkhead is already full of tasks held here, and the fewest
        more tasks any other bulkhead has room for (None: no bulkhead) (attempts.mu held).

        A claim skips the tasks of the full ones and takes no more than that room: every
        task of its group might call the same downstream, and a task claimed past what a
        bulkhead can start soon would sit RUNNING on a thread or in the buffer, its lease and
        timeout counting, while a task of another downstream waits PENDING. "Soon" is the
        prefetch's: a bulkhead of k holds k tasks plus k times the prefetch per thread (its
        permits work through them as fast as threads work through the buffer, about 50 ms
        while tasks are short), and k only once tasks are long; without it a bulkhead of 1
        cost a claim round trip per task (SQLite FULL: 280 tasks/s instead of 6,000). Tasks
        whose outcome waits for its commit hold nothing here."""
        limits = {name: g.bulkhead.limit for name, g in self.scheduler.guards.items()
                  if g.bulkhead is not None}
        if not limits:
            return frozenset(), None
        held: dict[str, int] = {}
        at = self.attempts
        for ctx in [*at.buffer, *at.running.values(), *at.aio.values()]:
            if key_of(ctx.task) in at.stuck:
                continue
            for name in ctx.task.downstreams:
                if name in limits:
                    held[name] = held.get(name, 0) + 1
        ahead = at.prefetch_now() / max(1, at.live_threads)  # per permit, as per thread
        return claim_room(limits, held, ahead)

    def _buffer(self, tasks: list[Task]) -> None:
        """Hand claimed attempts to the workers; wake the watchdog for a sooner deadline."""
        contexts, on_loop = self._contexts(tasks)
        at = self.attempts
        with at.mu:
            self.stats.claimed += len(contexts) + len(on_loop)
            late = self._stopping  # claimed while shutdown took the buffer: never started
            if not late:
                at.buffer.extend(contexts)
                at.work.notify(len(contexts))
                for ctx in on_loop:
                    at.aio[key_of(ctx.task)] = ctx
                    self.loop_room.take(ctx.task.kind)
        if on_loop and not late:
            assert self.aio is not None
            self.aio.submit(on_loop)
        contexts += on_loop
        if late:  # back at once, as the buffer's were (shutdown returns them too)
            released = self._release(contexts, "shutdown")
            with at.mu:
                self._released_late += released
            return
        deadlines = [t.deadline for t in tasks if t.deadline is not None]
        if deadlines:
            soonest = min(deadlines)
            with self._watch_mu:  # see _watch: read and written under its lock, or lost
                self._sooner = min(self._sooner, soonest)
                if soonest + DEADLINE_SLACK_S < self._watchdog_due:
                    self._watch_mu.notify()

    def _contexts(self, tasks: list[Task]) -> tuple[list[TaskContext], list[TaskContext]]:
        """Contexts of claimed attempts: for the worker threads, and for the event loop."""
        if self.aio is None:
            return [TaskContext(task, self) for task in tasks], []
        threads: list[TaskContext] = []
        on_loop: list[TaskContext] = []
        loop, executor_of = self.aio.loop, self._executor_of
        for task in tasks:
            if executor_of.get(task.kind) == "async":
                on_loop.append(AsyncTaskContext(task, self, loop))
            else:  # an unknown kind fails on a thread, saying so
                threads.append(TaskContext(task, self))
        return threads, on_loop

    # -- the event loop's feed (called on the loop thread) ---------------------------------

    def started(self, ctx: TaskContext) -> None:
        """A coroutine took the attempt: its wait since the claim is a thread_wait, as a
        buffered task's."""
        if self.scheduler.emit.sinks:
            self._emit_thread_wait(ctx.task)

    def finished(self, ended: list[tuple[TaskContext, Outcome]]) -> None:
        """Coroutine attempts ended: their outcomes wait for the completer's next group."""
        at = self.attempts
        with at.mu:
            for ctx, outcome in ended:
                key = key_of(ctx.task)
                if at.aio.pop(key, None) is not None:
                    self.loop_room.give(ctx.task.kind)
                at.committing[key] = (ctx, outcome)
            at.outcomes.notify()
            if not at.aio:
                at.loop_idle.notify_all()
            wake = not at.aio or self.loop_room.free() >= self._loop_wake_at
        if wake:  # room for a group on the loop: one claim for many ends, not one each
            self._claim_wake.set()

    def loop_lag(self) -> tuple[float, float]:
        """The event loop's lag now and the largest seen, in seconds ((0, 0) without one)."""
        if self.aio is None:
            return 0.0, 0.0
        return self.aio.lag_s, self.aio.lag_max_s

    # -- the workers -----------------------------------------------------------------------

    def _work(self) -> None:
        """Take an attempt, run it, hand the outcome to the completer; retire when told."""
        at = self.attempts
        name = threading.current_thread().name
        while True:
            with at.mu:
                while not at.buffer:
                    if self._stopping or at.live_threads > self.workers:
                        at.live_threads -= 1
                        return
                    at.waiting += 1
                    at.work.wait()
                    at.waiting -= 1
                ctx = at.buffer.popleft()
                key = key_of(ctx.task)
                at.running[key] = ctx
                self._thread_of[key] = name
            self._claim_wake.set()  # a slot in the buffer is free
            if self.scheduler.emit.sinks:
                self._emit_thread_wait(ctx.task)
            began = time.monotonic()
            outcome = self._execute(ctx)
            with at.mu:
                at.observe(time.monotonic() - began)
                at.running.pop(key, None)
                at.stopped.pop(key, None)
                self._thread_of.pop(key, None)
                if at.stuck.pop(key, None) is not None:
                    at.live_threads += 1  # back in service (it may retire just below)
                    log.info("worker thread %s is free again: task %s returned", name,
                             ctx.task.task_id, extra=task_extra(ctx.task))
                at.committing[key] = (ctx, outcome)
                at.outcomes.notify()
                retire = retires_on_return(at.live_threads, self.workers)
                if retire:
                    at.live_threads -= 1
                    self.stats.retired += 1
            if ctx.task.downstreams:  # its bulkhead has room again: no need to await the commit
                self._claim_wake.set()
            if retire:  # a replacement took this thread's place while it was stuck
                return

    def _execute(self, ctx: TaskContext) -> Outcome:
        """Run the user's function, outside every lock; any exception becomes a failure,
        a BaseException too (sys.exit() in a task must not end the thread: `TASK_EXITS`)."""
        task = ctx.task
        if ctx.stopped:  # canceled, timed out or released while it waited in the buffer
            return Outcome.failure(ErrorKind.CANCELED, "stopped before it started")
        try:
            definition = self.app.definition(task.kind)
            if definition.executor == "process":
                return self.procs.run(ctx, definition)
            with TaskOutput(ctx):
                return Outcome.success(definition.fn(ctx, task.payload))
        except BaseException as exc:
            return attempt_failure(ctx.logger, exc)

    # -- the completer ---------------------------------------------------------------------

    def _commit_loop(self) -> None:
        """Commit outcomes in groups (module doc); keep them through a store outage."""
        at = self.attempts
        pause = 0.0
        while True:
            group = self._next_group()
            if group is None:
                return
            try:
                answers = self._write(group)
            except StoreUnavailable as exc:  # keep every outcome; write it when it answers
                pause = min(_MAX_ERROR_PAUSE_S, max(0.05, pause * 2))
                log.warning("could not write %d outcome(s): %s; keeping them, trying again "
                            "in %.2fs", len(group), exc, pause)
                with at.mu:
                    if not self._closed:
                        at.outcomes.wait(pause)
                continue
            except Exception as exc:
                if self._closed:  # the store was closed after our shutdown: done
                    return
                pause = min(_MAX_ERROR_PAUSE_S, max(0.05, pause * 2))
                if not self._said_full(exc):
                    log.exception("writing %d outcome(s) failed; keeping them", len(group))
                with at.mu:
                    at.outcomes.wait(pause)
                continue
            pause = 0.0
            self._not_full()
            self._committed(group, answers)

    def _write(self, group: list[tuple[TaskContext, Outcome]]) -> list[Completed | LostRace]:
        """One group in one round trip. When the store refuses a value of the group (a
        result it cannot keep), each outcome is written alone and the refused one becomes a
        `result_error` failure of its task, instead of holding up the rest."""
        now = self.clock()
        try:
            return self.scheduler.complete_many([(c.task, o) for c, o in group], now)
        except (StoreUnavailable, StoreFull):
            raise
        except StoreError as exc:
            if self._closed:
                raise
            if len(group) > 1:
                return [answer for item in group for answer in self._write([item])]
            ctx, _ = group[0]
            log.error("the store refused the outcome of task %s: %s", ctx.task.task_id, exc,
                      extra=task_extra(ctx.task))
            failure = Outcome.failure(RESULT_ERROR, f"outcome could not be stored: {exc}")
            return self.scheduler.complete_many([(ctx.task, failure)], now)

    def _next_group(self) -> list[tuple[TaskContext, Outcome]] | None:
        """The outcomes to write next: all waiting, up to a group; wait briefly for more
        while other threads are about to finish (a group commit's window)."""
        at = self.attempts
        with at.mu:
            while not at.committing:
                if self._closed:
                    return None
                at.outcomes.wait()
            end = time.monotonic() + self._group_wait_s
            while (len(at.committing) < _MAX_GROUP and (at.busy() > 0 or at.aio)
                   and not self._closed):
                left = end - time.monotonic()
                if left <= 0:
                    break
                at.outcomes.wait(left)
            return [at.committing[k] for k in list(at.committing)[:_MAX_GROUP]]

    def _committed(self, group: list[tuple[TaskContext, Outcome]],
                   answers: list[Completed | LostRace]) -> None:
        at = self.attempts
        lost = []
        with at.mu:
            for (ctx, outcome), answer in zip(group, answers, strict=True):
                at.committing.pop(key_of(ctx.task), None)
                if isinstance(answer, LostRace):
                    self.stats.discarded += 1
                    lost.append((ctx, answer))
                else:
                    self.stats.completed += 1
                    self.stats.failed += not outcome.ok
            self.stats.groups += 1
            at.settled.notify_all()
        self._claim_wake.set()  # retries, freed batch slots and released dependents
        for ctx, answer in lost:
            now = answer.current.status.value if answer.current is not None else "gone"
            ctx.logger.info("late result discarded: the task is %s now", now)

    # -- the watchdog, the heartbeat, the listener -----------------------------------------

    def _watch(self) -> None:
        """Expire at the core's next deadline. A claim between the store's answer and the
        wait leaves its deadline in `_sooner` (under `_watch_mu`), so it cannot be missed: a
        deadline claimed before the question is in the store's answer, one claimed after
        it is in `_sooner`."""
        while not self._closing.is_set():
            with self._watch_mu:
                self._sooner = float("inf")
            now = self.clock()
            with self.attempts.mu:  # ended here, outcome not yet written: not running
                held = frozenset(c.task.task_id for c, _ in self.attempts.committing.values())
            try:
                moved = self.scheduler.expire(now, held)
                wait = self.scheduler.watchdog_wait(now, self._watchdog_s)
            except Exception as exc:
                if not self._said_full(exc):
                    log.exception("watchdog pass failed")
                moved, wait = [], self._watchdog_s
            if held and wait <= DEADLINE_SLACK_S:  # a held one is past its deadline: look
                wait = _POLL_S  # again soon, not in a tight loop until its outcome lands
            self._expired(moved)
            if self._check_stuck():
                wait = min(wait, self.stuck_after_s / 2)
            with self._watch_mu:
                due = min(now + wait, self._sooner + DEADLINE_SLACK_S)
                self._watchdog_due = due
                if not self._closing.is_set():
                    self._watch_mu.wait(max(0.0, due - now))

    def _expired(self, moved: list[Task]) -> None:
        if not moved:
            return
        with self.attempts.mu:
            self.stats.expired += len(moved)
            self.stats.failed += sum(t.worker_id == self.worker_id for t in moved)
        for task in moved:
            self._stop_task(task.task_id)
            log.info("watchdog: task %s %s (%s)", task.task_id, task.status.value,
                     task.error_msg, extra=task_extra(task))
        self._changed()

    def _check_stuck(self) -> bool:
        """Promote stopped attempts whose thread did not return to stuck; replace their
        threads up to the bound. Answers whether any stopped attempt is still pending."""
        at = self.attempts
        with at.mu:
            fresh = at.newly_stuck(self.stuck_after_s, self._thread_of)
            for i, stuck in enumerate(fresh):  # one at a time, as if they came in turn
                self._replace(stuck, len(at.stuck) - (len(fresh) - 1 - i))
            return bool(at.stopped) and len(at.stuck) < len(at.stopped)

    def _replace(self, stuck: Stuck, count: int) -> None:
        """A thread no longer counts as capacity: start another while at most
        `stuck_threads_max` are stuck (`count`: this one included), so there are never more
        than workers + stuck_threads_max threads (attempts.mu held)."""
        at = self.attempts
        extra = {"task_id": stuck.task_id}
        if not replaces_stuck(count, self.stuck_threads_max):
            log.error("worker thread %s is stuck on task %s (kind %r) and is not replaced: "
                      "%d threads are stuck, over the bound of %d; %d threads left to work",
                      stuck.thread, stuck.task_id, stuck.kind, count, self.stuck_threads_max,
                      at.live_threads, extra=extra)
            return
        stuck.replaced = True
        at.replacements += 1
        self.stats.replaced += 1
        log.warning("worker thread %s is stuck on task %s (kind %r), which ignored its stop "
                    "for %.1fs; started a replacement (%d stuck, bound %d)", stuck.thread,
                    stuck.task_id, stuck.kind, time.monotonic() - stuck.stopped_at,
                    count, self.stuck_threads_max, extra=extra)
        self._add_worker()

    def stuck_threads(self) -> list[dict[str, Any]]:
        """Threads busy with an attempt that is no longer RUNNING: kind, task, seconds since
        the stop, and whether a replacement took its place (metrics, the trace, status)."""
        at = self.attempts
        now = time.monotonic()
        with at.mu:
            return [{"kind": s.kind, "task_id": s.task_id, "thread": s.thread,
                     "for_s": round(now - s.stopped_at, 3), "replaced": s.replaced}
                    for s in at.stuck.values()]

    def _beat(self) -> None:
        self._beat_worker()
        while not self._closing.wait(self._heartbeat_s):
            with self.attempts.mu:
                held = self.attempts.in_flight()
            now = self.clock()
            try:
                renewed = self.scheduler.heartbeat_many(held, now)
            except Exception as exc:
                if not self._said_full(exc):
                    log.exception("heartbeat of %d task(s) failed; their leases decide",
                                  len(held))
                renewed = [True] * len(held)
            for task, ok in zip(held, renewed, strict=True):
                if not ok:  # this attempt only: a retry of the same task may run here too
                    self._stop_task(task.task_id, key_of(task))
            self._renew_permits()
            self._beat_worker()

    def worker_beat(self, stopped: bool = False) -> WorkerBeat:
        """What this process says of itself to the fleet (`Store.beat_worker`)."""
        at = self.attempts
        with at.mu:
            stuck = [s.kind for s in at.stuck.values()]
            busy = at.busy()
            stats = self.stats
            counts = (stats.claimed, stats.completed, stats.discarded)
            failed = stats.failed
        kinds: dict[str, int] = {}
        for kind in stuck:
            kinds[kind] = kinds.get(kind, 0) + 1
        return WorkerBeat(self.worker_id, self.app.name, self.workers, max(0, busy),
                          len(stuck), kinds, *counts, self._started_at, self.clock(), stopped,
                          failed)

    def _beat_worker(self, stopped: bool = False) -> None:
        try:
            self.scheduler.store.beat_worker(self.worker_beat(stopped))
        except Exception as exc:
            if not self._said_full(exc):
                log.warning("could not record this worker's beat", exc_info=True)

    def _said_full(self, exc: Exception) -> bool:
        """Whether `exc` says the store cannot grow: logged in one line the first time, and
        kept in `store_full` (a drain ends on it); the caller retries as it would anyway."""
        if not isinstance(exc, StoreFull):
            return False
        with self._full_mu:  # several threads meet it at once: one line
            said, self.store_full = self.store_full is not None, exc
        if not said:
            log.error("%s; tasks stay as they are in the store until it can grow", exc)
        return True

    def _not_full(self) -> None:
        if self.store_full is None:  # the common case, without the lock
            return
        with self._full_mu:
            was, self.store_full = self.store_full, None
        if was is not None:
            log.info("the store accepts writes again")

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
        wait_for_work = self.store.wait_for_work
        while not self._closing.is_set():
            try:
                woke = wait_for_work(_LISTEN_BOUND_S)
            except Exception:
                if self._closing.is_set():  # the store was closed after our shutdown: done
                    return
                log.exception("waiting for work notifications failed")
                self._closing.wait(1.0)
                continue
            if woke:
                self._changed()

    # -- reading for the trace and reports -------------------------------------------------

    def running_tasks(self) -> list[Task]:
        """Attempts executing in this runner now (stuck ones included)."""
        with self.attempts.mu:
            return [ctx.task for ctx in self.attempts.running.values()]


def task_extra(task: Task) -> dict[str, str]:
    """The `extra` of a runner log line about a task: every line of a task has its trace_id."""
    return {"task_id": task.task_id, "trace_id": task.trace_id}


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
