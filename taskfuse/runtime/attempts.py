"""The attempts a Runner holds, and the accounting that bounds what it claims.

An attempt is the RUNNING record a claim returned (task_id, version). Between its claim and
the commit of its outcome it is in exactly one of three places here:

* **buffered**: claimed, waiting for a free worker thread (a prefetch of at most `prefetch`
  beyond the threads while tasks are short, so a claim round trip overlaps with work, and
  at least `ahead_per_thread` per thread whatever their length: the limits' claim_batch);
* **running**: a worker thread executes it (`TaskContext`), or, for a kind of the async
  executor, **on the loop**: a coroutine runs it (or waits for its kind's cap) on the
  worker's event loop (`aio`), holding no thread;
* **committing**: its outcome waits for the completer's next group commit.

All three are renewed by the heartbeat, so a prefetched task or an outcome that waits out a
store outage keeps its lease. An attempt that was told to stop (timeout, cancel, lost lease,
shutdown) while its thread keeps running is **stopped**; past a grace it is **stuck**, the
thread no longer counts as capacity, and the runner may start a replacement (up to a
bound). When that thread finally returns, it retires if the pool is full again. A
coroutine that swallows its CancelledError and keeps running is stopped and stuck the same
way (`Stuck.coroutine`): its slot on the loop is given back up to the same bound, so the
loop's capacity is not lost silently.

One lock (`mu`) guards all of it; it is never held across a store call or user code, and
the runner's fuse lock is never taken while it is held (lock order: the fuse lock, then mu).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from taskfuse.core.capacity import claim_want
from taskfuse.core.task import Outcome, Task

if TYPE_CHECKING:
    from taskfuse.runtime.context import TaskContext

AttemptKey = tuple[str, int]
#: Largest group a claim or a commit takes at once.
MAX_GROUP = 256
#: Largest claim of a worker whose kinds all run on the event loop: its room frees by
#: thousands at once (a wave of coroutines ending together), and claiming it 256 at a time
#: put a claim round trip, serialized with the commits, between each 256 and their start.
#: Below PostgreSQL's 4,095 rows a claim statement.
MAX_LOOP_GROUP = 1024


def group_of(executor_of: Mapping[str, str]) -> int:
    """The largest claim, and the largest commit, of a worker running these kinds: a loop's
    group when every kind runs on the event loop (its ends come in waves of thousands, and
    committing them 256 at a time put three more transactions, serialized with the claims on
    SQLite, between a wave's end and the claim that refills it); a claim cannot choose
    kinds, so with thread kinds too it stays a thread claim's."""
    if executor_of and all(e == "async" for e in executor_of.values()):
        return MAX_LOOP_GROUP
    return MAX_GROUP


#: About the longest a prefetched task waits in the buffer for a thread (seconds).
PREFETCH_WAIT_S = 0.05
#: Weight of the newest run in the moving average of run time.
RUN_ALPHA = 0.2


def key_of(task: Task) -> AttemptKey:
    return task.task_id, task.version


@dataclass
class RunnerStats:
    """What a runner did (reports, tests, the trace footer); counted under `Attempts.mu`."""

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


@dataclass
class Stuck:
    """A worker thread still busy with an attempt that is no longer RUNNING."""

    kind: str
    task_id: str
    stopped_at: float  # time.monotonic() when the attempt was told to stop
    thread: str
    replaced: bool = False
    #: A coroutine on the event loop (it swallowed its CancelledError), not a thread.
    coroutine: bool = False
    key: AttemptKey | None = None


@dataclass
class Attempts:
    """The runner's in-flight attempts and thread accounting (module doc). Lock: `mu`."""

    workers: int
    prefetch: int
    #: Tasks claimed ahead per thread whatever their run time: the limits' `claim_batch` - 1
    #: (a thread holds claim_batch tasks, as a worker of the lab does).
    ahead_per_thread: int = 0
    mu: threading.Lock = field(default_factory=threading.Lock)
    buffer: deque[TaskContext] = field(default_factory=deque)
    running: dict[AttemptKey, TaskContext] = field(default_factory=dict)
    #: Attempts handed to the event loop (async kinds): no thread, not in `busy()`.
    aio: dict[AttemptKey, TaskContext] = field(default_factory=dict)
    committing: dict[AttemptKey, tuple[TaskContext, Outcome]] = field(default_factory=dict)
    #: Attempts told to stop whose thread has not returned, by key: monotonic time of the stop.
    stopped: dict[AttemptKey, float] = field(default_factory=dict)
    stuck: dict[AttemptKey, Stuck] = field(default_factory=dict)
    live_threads: int = 0  # worker threads that count as capacity (not stuck)
    waiting: int = 0  # worker threads waiting for an attempt now
    replacements: int = 0  # threads started to replace stuck ones, ever
    #: Moving average of an attempt's run time, in seconds. A prefetched task is RUNNING from
    #: its claim (its timeout, its lease and its duration count from then), so the prefetch
    #: shrinks as tasks get long: a buffered task waits about PREFETCH_WAIT_S at most. It
    #: starts long (no prefetch) until the first runs are seen.
    run_s: float = 1.0

    def __post_init__(self) -> None:
        self.work = threading.Condition(self.mu)  # a buffered attempt, or a reason to exit
        self.outcomes = threading.Condition(self.mu)  # an outcome to commit
        self.settled = threading.Condition(self.mu)  # a group committed
        self.loop_idle = threading.Condition(self.mu)  # the event loop holds no attempt

    # -- capacity (mu held) ----------------------------------------------------------------

    def busy(self) -> int:
        """Threads executing an attempt that still counts (not stuck)."""
        running = self.running
        return len(running) - sum(1 for key in self.stuck if key in running)

    def want(self) -> int:
        """How many more attempts a claim may take now: free threads plus the prefetch.
        Outcomes waiting for their commit hold no thread, and up to a prefetch of them are
        not counted, so while tasks are short the next claim's round trip overlaps the
        commit's: counted until committed, a fleet of two processes on PostgreSQL ran no
        faster than one (each claimer sat idle for its commit, 40 % busy), and one process
        ran 20 % slower. Beyond that they count, so a store slower to commit than to claim
        slows the claims instead of piling up outcomes a crash would lose; with no prefetch
        (long tasks) a thread's slot is free once its outcome is committed, as in the lab.
        (The store counts those tasks RUNNING until the commit, so batch caps still hold.)"""
        return claim_want(self.live_threads, self.prefetch_now(), len(self.buffer),
                          self.busy(), len(self.committing))

    def prefetch_now(self) -> int:
        """The prefetch the tasks' run times allow: claimed-but-waiting tasks wait about
        `buffer / threads x run time`, kept under PREFETCH_WAIT_S: enough to hide a claim's
        round trip behind short tasks, nothing that would show in a task's duration. A
        claim_batch above 1 asks for more on purpose: `ahead_per_thread` per thread always."""
        allowed = int(PREFETCH_WAIT_S * max(1, self.live_threads) / max(self.run_s, 1e-6))
        return max(min(self.prefetch, allowed), self.ahead_per_thread * self.live_threads)

    def observe(self, run_s: float) -> None:
        """Learn from one finished attempt how long tasks run."""
        self.run_s += RUN_ALPHA * (run_s - self.run_s)

    def in_flight(self) -> list[Task]:
        """Every attempt held here, for the heartbeat and the claim's exclusions."""
        tasks = [ctx.task for ctx in self.buffer]
        tasks += [ctx.task for ctx in self.running.values()]
        tasks += [ctx.task for ctx in self.aio.values()]
        tasks += [ctx.task for ctx, _ in self.committing.values()]
        return tasks

    def holding(self) -> Iterable[TaskContext]:
        """Contexts of attempts not yet executed or executing (a stop must reach them)."""
        yield from self.buffer
        yield from self.running.values()
        yield from self.aio.values()

    def idle(self, batch_id: str | None = None) -> bool:
        """Nothing (of the batch) buffered, executing (stuck threads aside) or waiting for a
        commit here."""
        if batch_id is None:
            return (not self.buffer and self.busy() <= 0 and not self.committing
                    and all(key in self.stuck for key in self.aio))
        stuck = self.stuck
        return not any(t.batch_id == batch_id for t in self.in_flight()
                       if (t.task_id, t.version) not in stuck)

    # -- stopping and stuck threads (mu held) ----------------------------------------------

    def mark_stopped(self, task_id: str, only: AttemptKey | None = None) -> list[TaskContext]:
        """Contexts of `task_id` (or of the attempt `only`) buffered or running here; running
        ones are now 'stopped'."""
        found = [ctx for ctx in self.holding() if ctx.task.task_id == task_id
                 and only in (None, key_of(ctx.task))]
        now = time.monotonic()
        for ctx in found:
            key = key_of(ctx.task)
            if key in self.running or key in self.aio:
                self.stopped.setdefault(key, now)
        return found

    def of_batch(self, batch_id: str) -> set[AttemptKey]:
        """Attempts of `batch_id` held here and not yet ended (buffered, running, on the
        loop)."""
        return {key_of(ctx.task) for ctx in self.holding() if ctx.task.batch_id == batch_id}

    def held_batches(self) -> dict[str, set[AttemptKey]]:
        """The batches of the attempts held here and not yet ended, with their attempts."""
        found: dict[str, set[AttemptKey]] = {}
        for ctx in self.holding():
            if ctx.task.batch_id is not None:
                found.setdefault(ctx.task.batch_id, set()).add(key_of(ctx.task))
        return found

    def take_ahead(self, keys: set[AttemptKey]) -> list[TaskContext]:
        """Take these attempts out of the buffer, unstarted (their task ended elsewhere)."""
        taken = [ctx for ctx in self.buffer if key_of(ctx.task) in keys]
        if taken:
            kept = [ctx for ctx in self.buffer if key_of(ctx.task) not in keys]
            self.buffer.clear()
            self.buffer.extend(kept)
        return taken

    def newly_stuck(self, grace_s: float, threads: dict[AttemptKey, str]) -> list[Stuck]:
        """Stopped attempts whose thread (or coroutine) is still busy `grace_s` after the
        stop: stuck now. A stuck thread no longer counts as capacity."""
        now = time.monotonic()
        out = []
        for key, since in self.stopped.items():
            if key in self.stuck or now - since < grace_s:
                continue
            coroutine = key not in self.running
            ctx = self.aio.get(key) if coroutine else self.running[key]
            if ctx is None:
                continue
            stuck = Stuck(ctx.task.kind, ctx.task.task_id, since,
                          "event-loop" if coroutine else threads.get(key, "?"),
                          coroutine=coroutine, key=key)
            self.stuck[key] = stuck
            if not coroutine:
                self.live_threads -= 1
            out.append(stuck)
        return out

    def excluded(self, overlap: frozenset[str]) -> frozenset[str]:
        """Tasks a claim must skip: a stopped attempt of theirs still runs here (unless their
        kind declares overlapping attempts safe)."""
        held = [self.running.get(k) or self.aio.get(k) for k in self.stopped]
        return frozenset(ctx.task.task_id for ctx in held
                         if ctx is not None and ctx.task.kind not in overlap)
