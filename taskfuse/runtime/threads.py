"""The runner: one worker process's roles around the core Scheduler, composed and started.

Theory of operation
-------------------
The runner is an interpreter of the core's answers; it never decides a delay, a limit or a
next status. It is a small composition of roles, each a module with one job, that meet in
`Shared` (the core, the attempt registry, the fuse gate, the wake-ups) and never read each
other's private state:

* the **claimer** (`claimer.py`) claims ready tasks in groups into the prefetch buffer and
  onto the event loop, within the room the threads, the loop and the bulkheads leave;
* the executors run claimed attempts: **threads** (`workers.py`), which run a kind in the
  thread or, for executor="process", in a killable task process (`procexec.py`), and the
  **async** executor (`aio.py`, fed through `loopfeed.py`): coroutines on one event loop;
* the **completer** (`completer.py`) commits outcomes in groups (group commit) and hands
  attempts back to PENDING (a release);
* the **watchdog** (`watchdog.py`) expires at the core's next deadline and replaces stuck
  worker threads; the **heartbeat** (`heartbeat.py`) renews every held attempt's lease in
  one statement and the fleet permits; with a durable store, the **listener**
  (`listener.py`) turns the store's wake-ups into looks by the claimer, and releases the
  claimed-ahead attempts of a batch canceled elsewhere at once;
* the **fuse gate** (`gate.py`) makes fuse decisions under one short lock (never I/O), and
  the **attempt registry** (`attempts.py`) knows which (task_id, version) is where.

Task code and executors reach the worker through the host interface (`host.py`), which
this class implements by handing each question to its role.

Locks. `lock` (re-entrant) is the fuse gate's: the Scheduler's decisions (rng, budget,
breakers) and the DownstreamCall's admissions hold it, briefly, and never across a store
call or user code. A MemoryStore is shared through `LockedStore` under the same lock; a
durable store needs none, so the database round trips of the claimer, the completer, the
watchdog and the task threads overlap. The registry's lock `attempts.mu` is taken inside
`lock` at most, never around it. Events reach the sinks one at a time under a lock of their
own.

Stopping a running task is cooperative: a cancel, a timeout, a lost lease or a release at
shutdown sets the attempt's stop signal (seen by `ctx.cancelled()` and `ctx.sleep()`), and
whatever it returns later loses the version check and is discarded. A thread that ignores
the signal is "stuck": after `stuck_after_s` it no longer counts as capacity, and a new
thread replaces it as long as at most `stuck_threads_max` are stuck (default: as many as
the workers), so a hang storm cannot start more than workers + stuck_threads_max threads;
a stuck thread that returns to a full pool retires (the lab applies the same rule:
`taskfuse.core.capacity`). A kind registered with executor="process" runs in a task
process instead, killed on that signal, so a hung task cannot keep its thread at all.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from taskfuse.core import reopen
from taskfuse.core.events import Event, EventKind, EventSink
from taskfuse.core.reopen import RetryResult
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import Store, WorkerBeat
from taskfuse.core.task import Task, TaskSpec
from taskfuse.runtime import waiting
from taskfuse.runtime.aio import AsyncExecutor, LoopRoom
from taskfuse.runtime.app import App
from taskfuse.runtime.attempts import MAX_GROUP, Attempts, RunnerStats, group_of
from taskfuse.runtime.calls import REAL_WAITS, CallClient, Waits
from taskfuse.runtime.claimer import Claimer
from taskfuse.runtime.completer import Completer
from taskfuse.runtime.fleet_limits import FleetLimits
from taskfuse.runtime.gate import FuseGate
from taskfuse.runtime.heartbeat import Heartbeat
from taskfuse.runtime.listener import LISTEN_BOUND_S, Listener
from taskfuse.runtime.loopfeed import LoopSide
from taskfuse.runtime.pools import PoolSection
from taskfuse.runtime.procexec import ProcessPool
from taskfuse.runtime.schedules import schedule_role
from taskfuse.runtime.shared import Shared, task_extra
from taskfuse.runtime.tracing import RuntimeTrace
from taskfuse.runtime.waiting import WaitResult
from taskfuse.runtime.watchdog import Watchdog
from taskfuse.runtime.workers import ThreadWorkers, spawn
from taskfuse.store import StoreFull, bounded
from taskfuse.store.memory import LockedStore, MemoryStore

__all__ = ["Runner", "RunnerStats", "default_worker_id", "task_extra"]

log = logging.getLogger("taskfuse.runtime")

_UNFINISHED = (TaskStatus.PENDING, TaskStatus.RUNNING)
#: Bound of idle waits on a durable store without notifications.
_POLL_S = 0.25
#: How often a join whose runner has nothing in flight asks the store whether other
#: processes' tasks are done: one index probe. At 0.25 s, a fleet of two processes draining
#: 20k tasks in 0.8 s spent up to a third more waiting to notice the other had finished.
_JOIN_POLL_S = 0.05
#: How long shutdown waits, past the grace, for threads whose task processes it killed, and
#: at least for the last commit.
_AFTER_KILL_S = 1.5
#: Tasks claimed ahead per worker thread at most, while tasks are short (the prefetch shrinks
#: to none as they get long: `Attempts.prefetch_now`).
_PREFETCH_PER_THREAD = 32


def default_worker_id() -> str:
    """host:pid, so an operator can tell which process holds a task."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Runner:
    """Runs an App's task functions from a Store: its roles, composed (see module doc)."""

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
        self.gate = FuseGate()
        #: The fuse lock (module doc): decisions and admissions, never I/O.
        self.lock = self.gate.lock
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
        if prefetch is None:  # short tasks: enough to hide a claim's round trip; long ones:
            prefetch = min(MAX_GROUP, _PREFETCH_PER_THREAD * workers)  # see Attempts.run_s
        self.attempts = Attempts(workers, prefetch, app.limits.claim_batch - 1)
        self.shared = Shared(self.worker_id, clock, self.scheduler, self.store,
                             self.attempts, self.gate)
        self.stats: RunnerStats = self.shared.stats
        #: Task processes of kinds with executor="process", started (and their functions
        #: imported) by `start` before the first claim.
        self.procs = ProcessPool(workers, preload=app.process_functions())
        self._roles(store, poll_s, watchdog_s, heartbeat_s, group_wait_s, stuck_after_s,
                    stuck_threads_max, async_concurrency)
        self._trace_path = Path(trace) if trace is not None else None
        self._trace_interval_s = trace_interval_s
        self._tracer: RuntimeTrace | None = None
        self._threads: list[threading.Thread] = []
        self._started = False

    def _roles(self, store: Store, poll_s: float | None, watchdog_s: float | None,
               heartbeat_s: float | None, group_wait_s: float, stuck_after_s: float,
               stuck_threads_max: int | None, async_concurrency: int | None) -> None:
        """Build the roles (module doc); nothing starts before `start`."""
        app, sh = self.app, self.shared
        #: Each kind's executor as the limits place it (a bad placement is refused here).
        executor_of = {kind: app.definition(kind).executor for kind in app.tasks}
        self.loop: LoopSide | None = None
        if "async" in executor_of.values():
            self.loop = LoopSide(sh, app, executor_of, async_concurrency)
        self.threads = ThreadWorkers(sh, app, self.procs, self.workers)
        if stuck_threads_max is None:  # the limits' bound, else as many as the threads
            limits = app.limits
            stuck_threads_max = (limits.stuck_threads_max
                                 if limits.stuck_threads_max is not None else self.workers)
        self.watchdog = Watchdog(sh, watchdog_s or app.limits.watchdog_interval_s,
                                 stuck_after_s, stuck_threads_max, self.threads.thread_of,
                                 self.threads.add,
                                 self.loop.free_slot if self.loop is not None else None)
        self.heartbeat = Heartbeat(sh, heartbeat_s or app.heartbeat_s, self.fleet, app.name,
                                   self.workers)
        self.completer = Completer(sh, group_wait_s, group_of(executor_of))
        wait_for_work = getattr(store, "wait_for_work", None)
        self.listener = (Listener(sh, wait_for_work)
                         if not self._local and callable(wait_for_work) else None)
        if poll_s is None and not self._local:
            poll_s = LISTEN_BOUND_S if self.listener is not None else _POLL_S
        overlap = frozenset(k for k, v in app.limits.kinds.items() if v.overlap)
        self.claimer = Claimer(sh, self, executor_of=executor_of, overlap=overlap,
                               loop=self.loop, poll_s=poll_s, release=self.completer.release,
                               claimed=self.watchdog.claimed)

    def __repr__(self) -> str:
        return f"Runner(worker_id={self.worker_id!r}, workers={self.workers}, app={self.app!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Runner:
        """Start the claimer, workers, completer, watchdog and heartbeat (and the trace);
        first the task processes of process kinds, their functions imported (a function no
        process can import raises RuntimeConfigError, and nothing was claimed)."""
        if self._started:
            raise RuntimeError("runner already started")
        if self.procs.preload:  # a task's timeout runs from its claim: import before one
            self.procs.warm()
        schedules = schedule_role(self, self.shared.closing)  # an unknown kind: refused here
        self._started = True
        self.heartbeat.started_at = self.clock()
        if self.loop is not None:
            self.loop.aio.start()
        if self._trace_path is not None:
            self._tracer = RuntimeTrace(self, self._trace_path, self._trace_interval_s)
        with self.attempts.mu:
            for _ in range(self.workers):
                self.threads.add()
        self.completer.thread = spawn(self.completer.run, "taskfuse-completer")
        self._threads.append(spawn(self.claimer.run, "taskfuse-claimer"))
        self._threads.append(spawn(self.watchdog.run, "taskfuse-watchdog"))
        self._threads.append(spawn(self.heartbeat.run, "taskfuse-heartbeat"))
        if schedules is not None:
            self._threads.append(spawn(schedules.run, "taskfuse-schedules"))
        if self.listener is not None:  # not joined at shutdown: it may sit in a wait a while
            spawn(self.listener.run, "taskfuse-listener")
        if self._tracer is not None:
            self._threads.append(spawn(self._tracer.run, "taskfuse-trace"))
        return self

    def wait_settled(self, timeout: float) -> bool:
        """Wait until every worker thread is up and waiting for work, so a task submitted
        now starts at once; False if that took longer than `timeout`. `start` returns once
        the threads exist; with thousands of them, they take a moment more to get there (a
        load test's time zero waits for this, or its first arrivals would queue behind it)."""
        return self.threads.wait_settled(timeout)

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def request_stop(self) -> None:
        """Stop claiming new tasks (the first step of a graceful shutdown); returns at once."""
        at = self.attempts
        with at.mu:
            self.shared.stopping = True
            at.work.notify_all()
        self.shared.claim_wake.set()

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
        release = self.completer.release
        with bounded(self.store, grace_s):  # a store that is down must not hold us past it
            released = release(self.claimer.take_buffer(), "shutdown")
        self.threads.join(deadline)
        self._wait_loop_idle(deadline)
        with self.attempts.mu:
            running = [*self.attempts.running.values(), *self.attempts.aio.values()]
        with bounded(self.store, max(0.1, (hard - time.monotonic()) / 2)):
            released += release(running, "shutdown")
        self.procs.close()  # after the release: a killed attempt must not count as failed
        for thread in self.threads.threads:  # threads of killed task processes return now
            thread.join(max(0.0, hard - time.monotonic()) / 2)
        if self.loop is not None:  # released coroutines were canceled: they end at once
            self._wait_loop_idle(hard)
        self.completer.drain(max(0.1, hard - time.monotonic()))
        if self.loop is not None:
            self.loop.aio.close(max(0.1, hard - time.monotonic()))
        if self._started:
            with bounded(self.store, max(0.1, hard - time.monotonic())):
                self.heartbeat.beat_worker(stopped=True)
        self._close(hard)
        with self.attempts.mu:
            late, self.claimer.released_late = self.claimer.released_late, []
        # A claim in flight when the stop came may have taken a task this shutdown had just
        # released, and released it again: each task once, as it was last released.
        return list({task.task_id: task for task in released + late}.values())

    def _close(self, hard: float) -> None:
        """The end of a shutdown: every role told to end, their threads joined."""
        sh = self.shared
        with self.attempts.mu:
            sh.closed = True
            self.attempts.outcomes.notify_all()
            self.attempts.settled.notify_all()
        sh.closing.set()
        sh.claim_wake.set()
        self.watchdog.wake()
        if self._tracer is not None:
            self._tracer.close()
            self._tracer = None
        end = max(time.monotonic() + 0.2, hard)  # a thread inside a store call that does
        committer = [self.completer.thread] if self.completer.thread else []
        for thread in [*self._threads, *committer]:  # not answer is left to its end
            thread.join(max(0.0, end - time.monotonic()))

    def _wait_loop_idle(self, until: float) -> None:
        if self.loop is not None:
            self.loop.wait_idle(until)

    @property
    def stopping(self) -> bool:
        return self.shared.stopping

    @property
    def is_local(self) -> bool:
        """Whether the store lives in this process (MemoryStore): no one else changes it."""
        return self._local

    @property
    def store_full(self) -> StoreFull | None:
        """Set while the store refuses to grow (`StoreFull`): a drain ends on it."""
        return self.shared.health.full

    @property
    def aio(self) -> AsyncExecutor | None:
        """The event loop of the async kinds (None without any)."""
        return self.loop.aio if self.loop is not None else None

    @property
    def loop_room(self) -> LoopRoom:
        """How many more attempts the loop may take (no room without async kinds)."""
        return self.loop.room if self.loop is not None else LoopRoom(0, {})

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
        self.shared.claim_wake.set()
        return task

    def submit_many(self, specs: Sequence[TaskSpec], batch_id: str | None = None) -> list[Task]:
        """Submit tasks at once (they may form a DAG); all or nothing. A batch named in the
        app's limits gets its cap and defaults (App.submit_to)."""
        for spec in specs:
            self.app.definition(spec.kind)
        tasks = self.app.submit_to(self.scheduler, specs, self.clock(), batch_id)
        self.shared.claim_wake.set()
        return tasks

    def submit_batch(
        self, specs: Sequence[TaskSpec], batch_id: str, cap: int | None = None
    ) -> list[Task]:
        """Submit a batch whose tasks run at most `cap` (default: the limits') at a time."""
        for spec in specs:
            self.app.definition(spec.kind)
        tasks = self.app.submit_to(self.scheduler, specs, self.clock(), batch_id, cap=cap,
                                   new_batch=True)
        self.shared.claim_wake.set()
        return tasks

    def cancel(self, task_id: str, reason: str = "canceled") -> Task | None:
        """Cancel a PENDING or RUNNING task; a running attempt here is told to stop."""
        task = self.scheduler.cancel(task_id, self.clock(), reason)
        if task is not None:
            self.shared.stop_task(task_id)
            self.shared.changed()
        return task

    def cancel_batch(self, batch_id: str, reason: str = "batch canceled") -> int:
        """Cancel every unfinished task of a batch; returns how many moved."""
        live = [t.task_id for t in self.store.batch_tasks(batch_id, _UNFINISHED)]
        n = self.scheduler.cancel_batch(batch_id, self.clock(), reason)
        for task_id in live:
            self.shared.stop_task(task_id)
        with self.attempts.mu:  # claimed ahead here: let go unrun, not run to be discarded
            held = self.attempts.of_batch(batch_id)
        self.shared.let_go(held, f"batch {batch_id} canceled")
        self.shared.changed()
        return n

    def retry(self, target: str, **options: Any) -> RetryResult:
        """Put a task's or a batch's ended tasks back to PENDING (`taskfuse.core.reopen.retry`:
        `statuses`, `reset_attempts`, `dry_run`), with the dependents they took down."""
        result = reopen.retry(self.store, target, self.clock(), emit=self.scheduler.emit,
                              **options)
        if result.retried:
            self.shared.changed()
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
        at, sh = self.attempts, self.shared
        bound = _JOIN_POLL_S
        while True:
            with at.mu:  # busy here, or the claimer still finding work: no need to ask
                busy = (not at.idle(batch_id) or not self.claimer.idle) and not sh.closed
                if busy:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    at.settled.wait(_min(left, bound))
                    continue
            if self.scheduler.settled(batch_id):
                return True
            left = None if end is None else end - time.monotonic()
            if sh.closed or (left is not None and left <= 0):
                return False
            with at.mu:
                at.settled.wait(_min(left, bound))

    # -- the host interface (host.py): each question to its role ---------------------------

    def work_changed(self) -> None:
        """Tell the claimer that claimable work may have appeared (e.g. a breaker closed).

        Safe to call with the fuse lock held: it takes no lock."""
        self.shared.claim_wake.set()

    def permit_waiting(self, task: Task, permit: Any) -> None:
        """An attempt is queued on a bulkhead or a pool (fuse lock held): the gate's."""
        self.gate.permit_waiting(task, permit)

    def permit_done(self, task: Task) -> None:
        self.gate.permit_done(task)

    def grant(self, woken: Iterable[Any]) -> None:
        """Wake the bulkhead waiters the core handed a permit to (fuse lock held)."""
        self.gate.grant(woken)

    def emit(self, event: Event) -> None:
        """Send an event to the scheduler's sinks."""
        self.shared.emit(event)

    def emit_wait(self, task: Task, subject: str, seconds: float, now: float) -> None:
        self.shared.emit(Event(now, EventKind.WAIT, task.task_id, task.batch_id,
                               task.trace_id, None, None, "bulkhead", task.attempt,
                               task.worker_id, subject, seconds))

    # -- reading for the trace and reports -------------------------------------------------

    def stuck_threads(self) -> list[dict[str, Any]]:
        """Threads busy with an attempt that is no longer RUNNING (`Watchdog.stuck_threads`)."""
        return self.watchdog.stuck_threads()

    def worker_beat(self, stopped: bool = False) -> WorkerBeat:
        """What this process says of itself to the fleet (`Store.beat_worker`)."""
        return self.heartbeat.worker_beat(stopped)

    def loop_lag(self) -> tuple[float, float]:
        """The event loop's lag now and the largest seen, in seconds ((0, 0) without one)."""
        return self.loop.lag() if self.loop is not None else (0.0, 0.0)

    def running_tasks(self) -> list[Task]:
        """Attempts executing in this runner now (stuck ones included)."""
        with self.attempts.mu:
            return [ctx.task for ctx in self.attempts.running.values()]


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
