"""The fleet view's data: what one poll of a store says, and the charts grown from the polls.

Why this exists: with many worker processes on one database there is no single trace to
follow, so the store itself is the source of truth. A poll asks only the stores' read-only
queries; this module turns their answers into the very shapes the trace monitor's widgets
already render (`Overview`, `BatchRow`, `TaskRow`), so the fleet view reuses those widgets.
Nothing here reads a clock: the time of a poll is an argument.

What the store can tell, and how it is read:

* counts by state and the RUNNING tasks: every poll (kept counts, a partial index);
* per batch: every batch and its counts every poll, in one query of the kept counts by
  batch (`batch_counts`), so they equal `taskfuse status` after each poll whatever moved
  (an operator's retry and another task's end in one poll left a settled batch's old counts
  up to 5 s when only live batches were counted again). A watcher of a schema from before
  the kept counts (it never migrates) would read every row for that: it lists the batches
  and counts the settled ones every `SLOW_POLL_S`, the live ones every poll (`BatchMemory`);
* the worker view, every poll: what each worker process says of itself in its beat (the
  workers table: threads, busy, stuck, attempts it ended and those that failed, when it last
  beat) and what it holds now (the RUNNING tasks above, by `worker_id` `host:pid` or
  `host:pid/i`: busy, latest heartbeat). Neither grows with the finished rows: the view
  used to sum the whole table by worker and status, 0.29 s at a million rows on PostgreSQL
  and growing with it, every five seconds. A process that never beats (a driver of its own
  on the Scheduler) shows while it holds tasks;
* per-batch p99: the nearest-rank p99 of the last attempt's duration (finished_at -
  started_at) of its ended tasks, asked again only for batches whose ended count moved;
* one task's history: what its record says (submitted, the last attempt's start and worker,
  heartbeat, backoff, end) and every change of it seen by the polls while it is watched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from taskfuse.core.history import record_history as core_history
from taskfuse.core.states import TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from tui.fmt import fmt_wait
from tui.taskindex import TaskRow
from tui.trace_model import CHART_COLUMNS, TERMINAL_STATES, BatchRow, Overview, Timeline

if TYPE_CHECKING:  # the monitor uses a store's read-only queries, never its writes
    from taskfuse.core.task import Task

#: The series a poll adds to the timeline (the names the trace format uses for the same).
SERIES: tuple[str, ...] = (
    "queue_depth", "running", "running_limit", "submitted", "throughput", "success_rate",
    *(f"done.{s}" for s in TERMINAL_STATES),
)
#: The charts show the last this many seconds of polls.
WINDOW_S = 600.0
#: The slow questions (p99 of batches whose ended count moved) at most this often.
SLOW_POLL_S = 5.0
#: A search shows at most this many tasks (and says "100+" when the store holds more).
SEARCH_SHOWN = 100
#: A process whose latest heartbeat, start or finish is older than this is not counted in
#: the fleet's threads (it stopped, or has been idle that long).
LIVE_S = 60.0


class FleetReads(Protocol):
    """The read-only questions the fleet view asks a store (every store answers them)."""

    def counts(self, batch_id: str | None = None) -> Mapping[TaskStatus, int]: ...
    def batch_ids(self) -> list[str]: ...
    def running(self) -> list[Task]: ...
    def find(self, id_or_trace: str) -> list[Task]: ...
    def search(self, text: str, limit: int = ...) -> list[Task]: ...
    def batch_p99(self, batch_id: str) -> float | None: ...
    def batch_counts(self) -> Mapping[str, Mapping[TaskStatus, int]] | None: ...


@dataclass(frozen=True, slots=True)
class RunningTask:
    """One RUNNING task as the store has it (times are the store's wall-clock seconds)."""

    task_id: str
    kind: str
    batch_id: str | None
    trace_id: str
    worker_id: str | None
    started_at: float | None
    attempt: int
    heartbeat_at: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker process (host:pid): its own beat, and the tasks it holds now."""

    process: str
    threads: int  # its worker threads (its beat), else the distinct /i of its RUNNING tasks
    busy: int  # tasks it runs now
    heartbeat: float | None  # its latest beat or task heartbeat
    last_seen: float | None  # the latest sign of it: a beat, a heartbeat, a start
    done: int  # attempts it ended (committed), by its beat
    errors: int  # of its attempts, those that ended in an error (failed or timed out)
    #: threads busy with a task that is no longer RUNNING (from the worker's own beat)
    stuck: int = 0


@dataclass(frozen=True, slots=True)
class FleetSample:
    """One poll: counts by state (all tasks and per batch), the RUNNING tasks, the workers."""

    t: float
    counts: Mapping[str, int]
    batches: tuple[BatchRow, ...]
    running: tuple[RunningTask, ...]
    workers: tuple[WorkerRow, ...] | None = None


def idle_repeat(prev: FleetSample | None, sample: FleetSample) -> bool:
    """Does `sample` show nothing `prev` did not, with nothing running? Heartbeats aside: an
    idle worker beats every few seconds, and its beat's age is the only thing that moves."""
    if prev is None or sample.running:
        return False

    def view(s: FleetSample) -> FleetSample:
        workers = None if s.workers is None else tuple(
            replace(w, heartbeat=None, last_seen=None) for w in s.workers)
        return replace(s, t=0.0, workers=workers)

    return view(prev) == view(sample)


#: A status's name by the status or its name (a StrEnum hashes as its value): TaskStatus(s)
#: per count cost 6 ms a poll at 1,000 batches.
_NAME: dict[str, str] = {s: s.value for s in TaskStatus}


def _by_name(counts: Mapping[TaskStatus, int]) -> dict[str, int]:
    return {_NAME[s]: int(n) for s, n in counts.items()}


def worker_rows(running: Sequence[RunningTask],
                beats: Sequence[WorkerBeat] = ()) -> tuple[WorkerRow, ...]:
    """One row per process, busiest first: what its beat says of it (threads, busy, stuck,
    attempts ended and failed), else what its RUNNING tasks show (a process that does not
    beat); a stopped process keeps its row, idle, so what it did stays in view."""
    held: dict[str, list[RunningTask]] = {}
    for r in running:
        if r.worker_id:
            held.setdefault(_process_of(r.worker_id), []).append(r)
    rows = {p: WorkerRow(p, len({_thread_of(r.worker_id or "") for r in rs}), len(rs),
                         _latest(*(r.heartbeat_at for r in rs)),
                         _latest(*(r.heartbeat_at for r in rs), *(r.started_at for r in rs)),
                         0, 0)
            for p, rs in held.items()}
    for b in beats:
        old = rows.get(b.worker_id) or WorkerRow(b.worker_id, 0, 0, None, None, 0, 0)
        rows[b.worker_id] = replace(
            old, threads=0 if b.stopped else b.threads, busy=0 if b.stopped else b.busy,
            stuck=0 if b.stopped else b.stuck, heartbeat=_latest(old.heartbeat, b.beat_at),
            last_seen=_latest(old.last_seen, b.beat_at), done=b.completed, errors=b.failed)
    return tuple(sorted(rows.values(), key=lambda r: (-r.busy, -(r.last_seen or 0.0),
                                                      r.process)))


def _process_of(worker_id: str) -> str:
    """`host:pid` of a worker id (`host:pid`, or `host:pid/i` naming one of its threads)."""
    process, _, _ = worker_id.rpartition("/")
    return process or worker_id


def _thread_of(worker_id: str) -> str:
    process, _, thread = worker_id.rpartition("/")
    return thread if process else ""


def _beats(store: Any) -> list[WorkerBeat]:
    """The workers' own beats, when the store keeps them (an older schema does not)."""
    workers = getattr(store, "workers", None)
    if not callable(workers):
        return []
    try:
        return list(workers())
    except Exception:  # a store whose schema predates the workers table: its running tasks
        return []


def _latest(*values: float | None) -> float | None:
    return max((v for v in values if v is not None), default=None)


def live_threads(workers: Sequence[WorkerRow], now: float) -> int | None:
    """Worker threads of the processes active in the last LIVE_S seconds (the fleet's
    running limit as far as the store shows it); None when no process is."""
    live = [w for w in workers
            if w.busy or (w.last_seen is not None and now - w.last_seen <= LIVE_S)]
    return sum(w.threads for w in live) if live else None


class P99Cache:
    """Per-batch p99, asked of the store again only when a batch's ended count moved."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, float | None]] = {}

    def get(self, store: FleetReads, batch: str, ended: int, refresh: bool) -> float | None:
        known = self._known.get(batch)
        if known is not None and (known[0] == ended or not refresh):
            return known[1]
        if not refresh and known is None and ended:
            refresh = True  # first sight of a batch: answer at once
        if not refresh:
            return None
        value = store.batch_p99(batch) if ended else None
        self._known[batch] = (ended, value)
        return value


class BatchMemory:
    """What the polls learned of the batches, so a fast poll of a store without kept counts
    by batch asks only what can move.

    Such a store (a schema from before them: a watcher never migrates) reads the batch's
    rows for each count (0.15 s for the list and 0.1 s per 333k-row batch at a million rows
    on PostgreSQL), and a poll of every second must not pay that. A fast poll re-counts only
    the batches that were live (PENDING or RUNNING tasks) when last counted and reuses the
    list; a slow poll asks everything again. A settled batch that comes back (a task added
    to it) shows its old counts until the next slow poll.
    """

    def __init__(self) -> None:
        self.ids: list[str] | None = None
        self.counts: dict[str, dict[str, int]] = {}
        self.p99 = P99Cache()
        self.ended: int | None = None  # tasks in an ended state at the last poll

    def reopened(self, counts: Mapping[str, int]) -> bool:
        """Did ended tasks leave their state since the last poll? Only an operator's retry
        (or a prune) moves them, and a settled batch they belong to must be counted again
        now, not at the next slow poll (the fleet said `✗1` beside `taskfuse status`'s
        `○1` for up to 5 s). Tasks that ended in the same second can hide it; the next slow
        poll counts every batch anyway."""
        ended = sum(counts.get(s, 0) for s in TERMINAL_STATES)
        moved = self.ended is not None and ended < self.ended
        self.ended = ended
        return moved

    def batch_ids(self, store: FleetReads, slow: bool) -> list[str]:
        if slow or self.ids is None:
            self.ids = store.batch_ids()
        return self.ids

    def counts_of(self, store: FleetReads, batch: str, slow: bool) -> dict[str, int]:
        known = self.counts.get(batch)
        if slow or known is None or known.get("PENDING", 0) or known.get("RUNNING", 0):
            known = self.counts[batch] = _by_name(store.counts(batch))
        return known


def poll_store(store: FleetReads, now: float, slow: bool = True,
               memory: BatchMemory | None = None) -> FleetSample:
    """Ask the store what the fleet is doing (read-only queries only; may raise StoreError).
    `slow`: also the list of batches, the settled batches' counts and the p99 of batches
    whose ended count moved (`BatchMemory`)."""
    counts = _by_name(store.counts())
    memory = memory or BatchMemory()
    batches = []
    for b, per in _batch_counts(store, counts, slow, memory):
        ended = sum(per.get(s, 0) for s in ("SUCCESS", "FAILED", "TIMEOUT"))
        batches.append(BatchRow(b, per, memory.p99.get(store, b, ended, slow)))
    running = tuple(
        RunningTask(t.task_id, t.kind, t.batch_id, t.trace_id, t.worker_id, t.started_at,
                    t.retry_count + 1, t.heartbeat_at)
        for t in sorted(store.running(), key=lambda t: (t.started_at or 0.0, t.task_id))
    )
    return FleetSample(now, counts, tuple(batches), running, worker_rows(running, _beats(store)))


def _batch_counts(store: FleetReads, counts: Mapping[str, int], slow: bool,
                  memory: BatchMemory) -> list[tuple[str, dict[str, int]]]:
    """Every batch and its counts: from the kept counts by batch (one query), or, for a
    store without them, what `BatchMemory` lets this poll ask."""
    kept = store.batch_counts()
    if kept is not None:
        return [(b, _by_name(per)) for b, per in kept.items()]
    recount = memory.reopened(counts) or slow
    return [(b, memory.counts_of(store, b, recount)) for b in memory.batch_ids(store, recount)]


def running_rows(sample: FleetSample) -> list[TaskRow]:
    """The RUNNING tasks as task-table rows: `since` carries the age, `reason` the kind."""
    return [
        TaskRow(r.task_id, "RUNNING", max(0.0, sample.t - r.started_at) if r.started_at else 0.0,
                r.attempt, r.batch_id, r.trace_id or None, r.worker_id, r.kind)
        for r in sorted(sample.running, key=lambda r: r.started_at or sample.t)
    ]


def ago(t: float | None, now: float) -> str:
    """How long before `now` (a poll's time) `t` was: "12s ago", "–" for none."""
    return "–" if t is None else f"{fmt_wait(max(0.0, now - t))} ago"


def task_lines(task: Task, now: float) -> list[tuple[str, str]]:
    """One task's record as (label, value) lines for the lookup view."""
    return [
        ("task", task.task_id), ("trace", task.trace_id or "–"),
        ("state", task.status.value), ("kind", task.kind), ("batch", task.batch_id or "–"),
        ("worker", task.worker_id or "–"),
        ("attempt", f"{task.retry_count + 1} of {task.max_retry + 1}"),
        ("created", ago(task.created_at, now)), ("started", ago(task.started_at, now)),
        ("finished", ago(task.finished_at, now)), ("heartbeat", ago(task.heartbeat_at, now)),
        ("timeout", f"{task.timeout:g}s"),
        ("operator retries", f"{task.operator_retries}, last "
                             f"{ago(task.operator_retried_at, now)}"
         if task.operator_retries else "–"),
        ("depends on", ", ".join(task.depends_on) or "–"),
        ("error", f"{task.error_kind}: {task.error_msg}" if task.error_kind else "–"),
    ]


@dataclass(frozen=True, slots=True)
class HistoryLine:
    """One line of a task's history as the store shows it: when (store time), what."""

    t: float | None
    what: str
    seen: bool = False  # observed by a poll (not read from the record's timestamps)


def record_history(task: Task) -> list[HistoryLine]:
    """What the record itself tells about the task's life, in time order (the lines of
    `taskfuse inspect`: `taskfuse.core.history`)."""
    return [HistoryLine(line.t, line.what) for line in core_history(task)]


def look_up(store: FleetReads, query: str) -> tuple[list[Task], bool]:
    """The tasks a `/` or `:` query names: that task id or trace id, else every task (up to
    SEARCH_SHOWN) whose id, trace, kind, batch or key contains it, as the replay's search
    matches a part of an id. Answers the tasks and whether they came from the search."""
    exact = store.find(query)
    if exact:
        return exact, False
    return store.search(query, SEARCH_SHOWN + 1)[:SEARCH_SHOWN], True


def search_count(store: FleetReads, query: str) -> tuple[int, bool]:
    """How many tasks a search finds, counted up to SEARCH_SHOWN (and whether there are
    more): what the prompt shows while typing."""
    n = len(store.search(query, SEARCH_SHOWN + 1))
    return min(n, SEARCH_SHOWN), n > SEARCH_SHOWN


class Watched:
    """The tasks a lookup shows, and every change of them the polls have seen since.
    `searched`: found by a part of their names (a poll asks the search again)."""

    def __init__(self, query: str, tasks: Sequence[Task], now: float,
                 searched: bool = False) -> None:
        self.query = query
        self.searched = searched
        self.tasks = {t.task_id: t for t in tasks}
        self.seen: dict[str, list[HistoryLine]] = {t.task_id: [] for t in tasks}
        self.t = now

    def update(self, tasks: Sequence[Task], now: float) -> bool:
        """A poll's fresh records; answers whether any of them changed."""
        changed = False
        for task in tasks:
            old = self.tasks.get(task.task_id)
            if old is not None and old.version != task.version:
                self.seen[task.task_id].append(HistoryLine(now, _change(old, task), seen=True))
                changed = True
            self.tasks[task.task_id] = task
        self.t = now
        return changed

    def history(self, task_id: str) -> list[HistoryLine]:
        """The record's story and the changes seen, in time order (undated lines first)."""
        lines = record_history(self.tasks[task_id]) + self.seen.get(task_id, [])
        return sorted(lines, key=lambda h: (h.t is not None, h.t or 0.0))


def _change(old: Task, new: Task) -> str:
    """A change a poll saw: `RUNNING -> PENDING (version 5, attempt 2, http_429)`."""
    notes = [f"version {new.version}"]
    if new.started_at is not None:
        notes.append(f"attempt {new.retry_count + 1}")
    if new.operator_retries > old.operator_retries:
        notes.append("retried by an operator")
    elif new.error_kind and new.status is not TaskStatus.SUCCESS:
        notes.append(new.error_kind)
    return f"{old.status.value} -> {new.status.value} ({', '.join(notes)})"


class FleetModel:
    """The polls so far: the latest sample, plus a timeline of the numbers the charts need.

    Owned by the UI thread; the polling thread hands it samples in messages.
    """

    def __init__(self) -> None:
        self.timeline = Timeline(list(SERIES))
        self.latest: FleetSample | None = None
        self.workers: tuple[WorkerRow, ...] | None = None

    @property
    def threads(self) -> int | None:
        """The fleet's worker threads at the latest poll (see `live_threads`)."""
        if self.workers is None or self.latest is None:
            return None
        return live_threads(self.workers, self.latest.t)

    def add(self, sample: FleetSample) -> None:
        prev, self.latest = self.latest, sample
        if sample.workers is not None:
            self.workers = sample.workers
        if prev is not None:  # a fast poll: per-batch p99 from the last slow one
            known = {b.batch_id: b.p99 for b in prev.batches}
            self.latest = replace(sample, batches=tuple(
                b if b.p99 is not None else replace(b, p99=known.get(b.batch_id))
                for b in sample.batches))
        c = sample.counts
        finished = sum(c.get(s, 0) for s in TERMINAL_STATES)
        throughput = np.nan
        if prev is not None and sample.t > prev.t:
            before = sum(prev.counts.get(s, 0) for s in TERMINAL_STATES)
            throughput = max(0.0, finished - before) / (sample.t - prev.t)
        ok = c.get("SUCCESS", 0) / finished if finished else np.nan
        limit = self.threads
        row = [c.get("PENDING", 0), c.get("RUNNING", 0), np.nan if limit is None else limit,
               sum(c.values()), throughput, ok, *(c.get(s, 0) for s in TERMINAL_STATES)]
        self.timeline.append(np.array([sample.t]), np.array([row], dtype=float))

    def overview(self, width: int = CHART_COLUMNS) -> Overview | None:
        """Queue depth and running over the last WINDOW_S seconds of polls, at the latest."""
        if self.latest is None:
            return None
        tl = self.timeline
        i = tl.n - 1
        t1 = self.latest.t
        t0 = max(float(tl.times[0]), t1 - WINDOW_S)
        if t1 <= t0:  # one poll so far: give the chart a span to draw it in
            t0 = t1 - 1.0
        v = tl.value

        def chart(name: str) -> np.ndarray:
            return tl.chart(name, i, t0, t1, width)

        return Overview(
            v("queue_depth", i), v("running", i), v("running_limit", i), v("submitted", i),
            {s: v(f"done.{s}", i) for s in TERMINAL_STATES}, v("throughput", i),
            v("success_rate", i), chart("queue_depth"), chart("running"),
            chart("running_limit"), chart("throughput"), chart("success_rate"),
        )
