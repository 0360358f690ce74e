"""MemoryStore: the Store protocol in process memory, the lab's default and the tests' oracle.

It keeps the indexes a database would: ready queues ("lanes") per (batch, downstreams) in
the order of (-priority, ready_at, seq) (`_Lane`), a heap of tasks waiting out a backoff keyed by
not_before (so claims never pop and re-push delayed entries), a deadline heap for the
watchdog, and per-task counts of unfinished dependencies (graphlib's way). Heap entries
carry the version they were pushed at; an entry whose task has moved on is stale and is
dropped when met. Every status change goes through `swap`, the compare-and-set.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from itertools import count
from typing import Any

from taskfuse.core.dag import missing_dependency
from taskfuse.core.states import TaskEvent, TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from taskfuse.core.task import Batch, Task, move
from taskfuse.store.failures import StoreError
from taskfuse.store.sql import CANCEL_FROM, SEARCH_LIMIT

_PENDING = TaskStatus.PENDING
_RUNNING = TaskStatus.RUNNING
_SUCCESS = TaskStatus.SUCCESS
_CLAIM = TaskEvent.CLAIM

LaneKey = tuple[str | None, tuple[str, ...]]
Entry = tuple[int, float, int, str, int]  # (-priority, ready_at, seq, task_id, version)


class _Lane:
    """One lane's ready entries: a run kept in order, and a heap for what arrives out of it.

    A batch submitted at once enters its lane in order (one priority, one ready time, rising
    sequence numbers), and so do most retries (promoted in not_before order): they append
    to the run and leave from its front in O(1). Only an entry that would break the order (a
    higher priority, an earlier ready time) goes to the heap. The head is the smaller of the
    two fronts, so entries leave in exactly a heap's order, while a claim from a lane of a
    million tasks no longer pays a pop's twenty comparisons of tuples.
    """

    __slots__ = ("heap", "run")

    def __init__(self) -> None:
        self.run: deque[Entry] = deque()
        self.heap: list[Entry] = []

    def __len__(self) -> int:
        return len(self.run) + len(self.heap)

    def push(self, entry: Entry) -> None:
        run = self.run
        if not run or run[-1] < entry:
            run.append(entry)
        else:
            heapq.heappush(self.heap, entry)

    def head(self) -> Entry | None:
        run, heap = self.run, self.heap
        if heap and (not run or heap[0] < run[0]):
            return heap[0]
        return run[0] if run else None

    def pop(self) -> Entry:
        run, heap = self.run, self.heap
        if heap and (not run or heap[0] < run[0]):
            return heapq.heappop(heap)
        return run.popleft()


def _written(fresh: Sequence[Task]) -> list[Task]:
    """The tasks an insert writes: of several carrying one new key, only the first (the rest
    are answered with it)."""
    keys: set[str] = set()
    out = []
    for task in fresh:
        key = task.idempotency_key
        if key:
            if key in keys:
                continue
            keys.add(key)
        out.append(task)
    return out


class MemoryStore:
    """All tasks in dicts and heaps. Not thread-safe: the threaded runtime locks around it."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._by_key: dict[str, str] = {}
        self._by_trace: dict[str, list[str]] = defaultdict(list)
        self._children: dict[str, list[str]] = defaultdict(list)
        self._unmet: dict[str, int] = {}
        self._lanes: dict[LaneKey, _Lane] = {}
        self._delayed: list[tuple[float, int, str, int]] = []
        self._deadlines: list[tuple[float, int, str, int]] = []
        self._pending_age: list[tuple[float, int, str, int]] = []
        self._track_age = False  # the age heap is built on the first sweep that asks for it
        self._running: dict[str, None] = {}
        self._counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)
        self._batch_counts: dict[str, dict[TaskStatus, int]] = {}
        self._batches: dict[str, Batch] = {}
        self._caps: dict[str, int] = {}
        self._seq = count()
        self._workers: dict[str, WorkerBeat] = {}

    # -- writing ---------------------------------------------------------------------------

    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        fresh = [t for t in tasks if not (t.idempotency_key and t.idempotency_key in self._by_key)]
        ids = [t.task_id for t in fresh]
        clash = next((i for i in ids if i in self._tasks), None)
        if clash is not None or len(set(ids)) != len(ids):
            raise StoreError(f"task_id {clash or 'in batch'!r} already exists")
        problem = missing_dependency([(t.task_id, t.depends_on) for t in _written(fresh)],
                                     self._tasks.__contains__)
        if problem is not None:
            raise problem
        out: list[tuple[Task, bool]] = []
        for task in tasks:
            key = task.idempotency_key
            if key and key in self._by_key:
                out.append((self._tasks[self._by_key[key]], False))
                continue
            if key:
                self._by_key[key] = task.task_id
            self._add(task)
            out.append((task, True))
        return out

    def _add(self, task: Task) -> None:
        tid = task.task_id
        self._tasks[tid] = task
        self._by_trace[task.trace_id].append(tid)
        self._count(task.batch_id, task.status, 1)
        if task.depends_on:
            unmet = 0
            for dep in task.depends_on:
                self._children[dep].append(tid)
                parent = self._tasks.get(dep)
                if parent is None or parent.status is not _SUCCESS:
                    unmet += 1
            self._unmet[tid] = unmet
        if task.status is _PENDING:
            self._enter_pending(task)

    def swap(self, new: Task, expected_version: int) -> bool:
        old = self._tasks.get(new.task_id)
        if old is None or old.version != expected_version:
            return False
        self._tasks[new.task_id] = new
        src, dst = old.status, new.status
        if src is not dst:
            self._recount(new.batch_id, src, dst)
            if src is _RUNNING:
                self._running.pop(new.task_id, None)
            if dst is _RUNNING:
                self._running[new.task_id] = None
                if new.started_at is not None:
                    heapq.heappush(
                        self._deadlines,
                        (new.started_at + new.timeout, next(self._seq), new.task_id, new.version),
                    )
            elif dst is _PENDING:
                self._enter_pending(new)
            elif dst is _SUCCESS:
                self._release_children(new.task_id)
        return True

    def cancel_batch(self, batch_id: str, now: float, error_kind: str,
                     reason: str) -> list[tuple[TaskStatus, Task]]:
        """Every unfinished task of the batch through the table's CANCEL move, in one call
        (the durable stores: one statement); answers (the status it left, its new record)."""
        out = []
        for task in self.batch_tasks(batch_id, CANCEL_FROM):
            new = move(task, TaskEvent.CANCEL, now, error_kind=error_kind, error_msg=reason)
            self.swap(new, task.version)
            out.append((task.status, new))
        return out

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        """Compare-and-set each move in order (one process: nothing to group)."""
        return [self.swap(new, expected) for new, expected in moves]

    def _enter_pending(self, task: Task) -> None:
        seq = next(self._seq)
        if self._track_age:
            heapq.heappush(self._pending_age, (task.waiting_since, seq, task.task_id, task.version))
        if self._unmet.get(task.task_id):
            return
        if task.not_before is not None:
            heapq.heappush(self._delayed, (task.not_before, seq, task.task_id, task.version))
        else:
            self._push_ready(task, task.created_at, seq)

    def _push_ready(self, task: Task, ready_at: float, seq: int) -> None:
        lane = (task.batch_id, task.downstreams)
        queue = self._lanes.get(lane)
        if queue is None:
            queue = self._lanes[lane] = _Lane()
        queue.push((-task.priority, ready_at, seq, task.task_id, task.version))

    def _release_children(self, task_id: str) -> None:
        for child_id in self._children.get(task_id, ()):
            left = self._unmet.get(child_id, 0) - 1
            self._unmet[child_id] = left
            child = self._tasks[child_id]
            if left == 0 and child.status is _PENDING:
                self._unmet.pop(child_id)
                if child.not_before is not None:
                    heapq.heappush(
                        self._delayed,
                        (child.not_before, next(self._seq), child_id, child.version),
                    )
                else:
                    self._push_ready(child, child.created_at, next(self._seq))

    def _count(self, batch_id: str | None, status: TaskStatus, delta: int) -> None:
        self._counts[status] += delta
        if batch_id is not None:
            per = self._batch_counts.get(batch_id)
            if per is None:
                per = self._batch_counts[batch_id] = dict.fromkeys(TaskStatus, 0)
            per[status] += delta

    def _recount(self, batch_id: str | None, src: TaskStatus, dst: TaskStatus) -> None:
        """One task moved from `src` to `dst`: `_count` twice, in one call (every move)."""
        counts = self._counts
        counts[src] -= 1
        counts[dst] += 1
        if batch_id is not None:
            per = self._batch_counts.get(batch_id)
            if per is None:
                per = self._batch_counts[batch_id] = dict.fromkeys(TaskStatus, 0)
            per[src] -= 1
            per[dst] += 1

    def _prunable(self, cutoff: float, statuses: Sequence[TaskStatus],
                  batch_id: str | None) -> list[Task]:
        wanted = set(statuses)
        live = (_PENDING, _RUNNING)
        return [t for t in self._tasks.values()
                if t.status in wanted and t.finished_at is not None and t.finished_at < cutoff
                and (batch_id is None or t.batch_id == batch_id)
                and not any(self._tasks[c].status in live for c in self._children.get(t.task_id, ())
                            if c in self._tasks)]

    def prune(self, cutoff: float, statuses: Sequence[TaskStatus], batch_id: str | None,
              limit: int) -> dict[TaskStatus, int]:
        """Delete up to `limit` ended tasks, oldest first (the durable stores' rule); a batch
        they belong to gets a record if it had none (`SQLiteStore.prune`)."""
        gone: dict[TaskStatus, int] = {}
        for task in self._prunable(cutoff, statuses, batch_id)[:limit]:
            del self._tasks[task.task_id]
            if task.idempotency_key:
                self._by_key.pop(task.idempotency_key, None)
            self._by_trace[task.trace_id].remove(task.task_id)
            for dep in task.depends_on:
                if task.task_id in self._children.get(dep, ()):
                    self._children[dep].remove(task.task_id)
            self._count(task.batch_id, task.status, -1)
            if task.batch_id is not None:  # remembered once its tasks are gone (EMPTY)
                self._batches.setdefault(task.batch_id, Batch(task.batch_id, None,
                                                              task.created_at))
            gone[task.status] = gone.get(task.status, 0) + 1
        return gone

    def prunable(self, cutoff: float, statuses: Sequence[TaskStatus],
                 batch_id: str | None) -> dict[TaskStatus, int]:
        out: dict[TaskStatus, int] = {}
        for task in self._prunable(cutoff, statuses, batch_id):
            out[task.status] = out.get(task.status, 0) + 1
        return out

    def heartbeat(self, task_id: str, version: int, now: float) -> bool:
        task = self._tasks.get(task_id)
        if task is None or task.version != version or task.status is not _RUNNING:
            return False
        renewed = task.copy()
        renewed.heartbeat_at = now
        self._tasks[task_id] = renewed
        return True

    def beat_worker(self, beat: WorkerBeat) -> None:
        self._workers[beat.worker_id] = beat

    def workers(self) -> list[WorkerBeat]:
        return sorted(self._workers.values(), key=lambda b: -b.beat_at)

    def heartbeat_many(self, attempts: Sequence[tuple[str, int]], now: float) -> list[bool]:
        out = []
        for task_id, version in attempts:
            task = self._tasks.get(task_id)
            ok = task is not None and task.version == version and task.status is _RUNNING
            if ok:
                renewed = task.copy()  # type: ignore[union-attr]
                renewed.heartbeat_at = now
                self._tasks[task_id] = renewed
            out.append(ok)
        return out

    def put_batch(self, batch: Batch) -> Batch:
        existing = self._batches.get(batch.batch_id)
        if existing is not None:
            return existing
        self._batches[batch.batch_id] = batch
        self._batch_counts.setdefault(batch.batch_id, dict.fromkeys(TaskStatus, 0))
        if batch.cap is not None:
            self._caps[batch.batch_id] = batch.cap
        return batch

    # -- claiming --------------------------------------------------------------------------

    def claim(
        self, worker_id: str, now: float, limit: int, blocked: frozenset[str] = frozenset(),
        exclude: AbstractSet[str] = frozenset(),
    ) -> list[Task]:
        delayed = self._delayed
        if delayed and delayed[0][0] <= now:
            self._promote(now)
        claimed: list[Task] = []
        skipped: list[tuple[LaneKey, Entry]] = []
        tasks = self._tasks
        lanes = self._lanes
        while len(claimed) < limit:
            lane = self._best_lane(blocked)
            if lane is None:
                break
            queue = lanes[lane]
            entry = queue.pop()
            if not queue:
                del lanes[lane]
            if exclude and entry[3] in exclude:
                skipped.append((lane, entry))
                continue
            task = tasks[entry[3]]
            new = move(task, _CLAIM, now)
            new.worker_id = worker_id  # not yet stored: still ours to finish
            self._started(new)
            claimed.append(new)
        for lane, entry in skipped:  # back in place: ready for a claim that may take them
            queue = lanes.get(lane)
            if queue is None:
                queue = lanes[lane] = _Lane()
            queue.push(entry)
        return claimed

    def _started(self, new: Task) -> None:
        """Store a task just claimed. `swap`'s bookkeeping for PENDING -> RUNNING, without the
        version check: the record was read from its ready lane by this very claim, and claims
        are the store's hottest operation."""
        tid = new.task_id
        self._tasks[tid] = new
        counts = self._counts
        counts[_PENDING] -= 1
        counts[_RUNNING] += 1
        if new.batch_id is not None:
            per = self._batch_counts[new.batch_id]
            per[_PENDING] -= 1
            per[_RUNNING] += 1
        self._running[tid] = None
        heapq.heappush(self._deadlines,
                       (new.started_at + new.timeout, next(self._seq), tid, new.version))  # type: ignore[operator]

    def _promote(self, now: float) -> None:
        """Move tasks whose backoff has passed from the delayed heap to their ready lane."""
        delayed = self._delayed
        tasks = self._tasks
        while delayed and delayed[0][0] <= now:
            not_before, seq, task_id, version = heapq.heappop(delayed)
            task = tasks[task_id]
            if task.version == version and task.status is _PENDING:
                self._push_ready(task, not_before, seq)

    def _best_lane(self, blocked: frozenset[str]) -> LaneKey | None:
        """The lane whose head goes first among lanes not capped or blocked; drops stale heads."""
        lanes = self._lanes
        if len(lanes) == 1 and not self._caps and not blocked:  # one lane, nothing to skip
            for lane, queue in lanes.items():
                return lane if self._live_head(queue) is not None else self._drop(lane)
        best: LaneKey | None = None
        best_head = None
        caps = self._caps
        for lane, queue in list(lanes.items()):
            batch_id, downstreams = lane
            if batch_id in caps and self._batch_counts[batch_id][_RUNNING] >= caps[batch_id]:
                continue
            if blocked and downstreams and not blocked.isdisjoint(downstreams):
                continue
            head = self._live_head(queue)
            if head is None:
                self._drop(lane)
                continue
            if best_head is None or head < best_head:
                best, best_head = lane, head
        return best

    def _live_head(self, queue: _Lane) -> Entry | None:
        """Drop stale entries off a lane's front; its live head, if one is left."""
        tasks = self._tasks
        while True:
            head = queue.head()
            if head is None:
                return None
            task = tasks[head[3]]
            if task.version == head[4] and task.status is _PENDING:
                return head
            queue.pop()

    def _drop(self, lane: LaneKey) -> None:
        del self._lanes[lane]

    # -- reading ---------------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def find(self, id_or_trace: str) -> list[Task]:
        found = [self._tasks[i] for i in self._by_trace.get(id_or_trace, ())]
        task = self._tasks.get(id_or_trace)
        if task is not None and task not in found:
            found.insert(0, task)
        return found

    def search(self, text: str, limit: int = SEARCH_LIMIT) -> list[Task]:
        """As the SQL stores' (`NamedQueryReads.search`): a part of id, trace, kind, batch or
        key, ASCII case folded, newest first, at most `limit`."""
        want = _ascii_fold(text)
        found = [t for t in reversed(self._tasks.values())
                 if any(want in _ascii_fold(v) for v in (t.task_id, t.trace_id, t.kind,
                                                         t.batch_id, t.idempotency_key) if v)]
        return found[: max(1, min(int(limit), SEARCH_LIMIT))]

    def overdue(self, now: float) -> list[Task]:
        return self._due(self._deadlines, now, _RUNNING)

    def _due(
        self, heap: list[tuple[float, int, str, int]], cutoff: float, status: TaskStatus
    ) -> list[Task]:
        """Tasks of `status` whose heap key is below `cutoff`, oldest first.

        A repeatable query, as on a database: stale entries are dropped, live ones are put
        back (the caller's move will make them stale).
        """
        tasks = self._tasks
        out: list[Task] = []
        keep = []
        while heap and heap[0][0] < cutoff:
            entry = heapq.heappop(heap)
            task = tasks[entry[2]]
            if task.version == entry[3] and task.status is status:
                out.append(task)
                keep.append(entry)
        for entry in keep:
            heapq.heappush(heap, entry)
        return out

    def next_deadline(self) -> float | None:
        heap = self._deadlines
        tasks = self._tasks
        while heap:
            deadline, _, task_id, version = heap[0]
            task = tasks[task_id]
            if task.version == version and task.status is _RUNNING:
                return deadline
            heapq.heappop(heap)
        return None

    def stale_running(self, now: float, lease_s: float | None) -> list[Task]:
        out = []
        for task_id in self._running:
            task = self._tasks[task_id]
            started = task.started_at if task.started_at is not None else now
            lapsed = (
                lease_s is not None
                and task.heartbeat_at is not None
                and task.heartbeat_at + lease_s < now
            )
            if lapsed or started + 2 * task.timeout < now:
                out.append(task)
        return out

    def running_over_limit(self) -> list[Task]:
        tasks = self._tasks
        return [t for t in map(tasks.__getitem__, self._running) if t.retry_count > t.max_retry]

    def waiting_since_before(self, cutoff: float) -> list[Task]:
        if not self._track_age:
            self._track_age = True
            self._pending_age = [
                (t.waiting_since, next(self._seq), t.task_id, t.version)
                for t in self._tasks.values()
                if t.status is _PENDING
            ]
            heapq.heapify(self._pending_age)
        return self._due(self._pending_age, cutoff, _PENDING)

    def next_ready_at(self, now: float) -> float | None:
        delayed = self._delayed
        tasks = self._tasks
        while delayed:
            not_before, _, task_id, version = delayed[0]
            task = tasks[task_id]
            if task.version == version and task.status is _PENDING:
                return max(not_before, now)
            heapq.heappop(delayed)
        return None

    def dependents_of(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks that depend on any of these, each once."""
        seen = dict.fromkeys(c for t in task_ids for c in self._children.get(t, ()))
        return [self._tasks[c] for c in seen]

    def dependents(self, task_id: str) -> list[Task]:
        return [self._tasks[c] for c in self._children.get(task_id, ())]

    def has_unfinished(self, batch_id: str | None = None) -> bool:
        counts = self._counts if batch_id is None else self._batch_counts.get(batch_id, {})
        return bool(counts.get(_PENDING) or counts.get(_RUNNING))

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        if batch_id is None:
            return dict(self._counts)
        return dict(self._batch_counts.get(batch_id) or dict.fromkeys(TaskStatus, 0))

    def get_batch(self, batch_id: str) -> Batch | None:
        return self._batches.get(batch_id)

    def batch_ids(self) -> list[str]:
        return list(self._batch_counts)

    def batch_counts(self) -> dict[str, dict[TaskStatus, int]]:
        """Every batch with its counts by status (the kept ones), as `batch_ids` lists them."""
        return {b: dict(per) for b, per in self._batch_counts.items()}

    def batch_tasks(
        self, batch_id: str, statuses: Iterable[TaskStatus] | None = None
    ) -> list[Task]:
        wanted = set(statuses) if statuses is not None else None
        return [
            t
            for t in self._tasks.values()
            if t.batch_id == batch_id and (wanted is None or t.status in wanted)
        ]

    def running(self) -> list[Task]:
        return [self._tasks[i] for i in self._running]

    def all_tasks(self) -> list[Task]:
        return list(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """Nothing to release; present so callers can close any store alike."""

    # -- read-only questions of the fleet view (the SQL stores' named queries, by hand) --------

    def batch_p99(self, batch_id: str) -> float | None:
        """Nearest-rank p99 of the last-attempt durations of a batch's ended tasks."""
        from taskfuse.core.metrics import percentile

        timed = (_SUCCESS, TaskStatus.FAILED, TaskStatus.TIMEOUT)
        return percentile([t.finished_at - t.started_at for t in self._tasks.values()
                           if t.batch_id == batch_id and t.status in timed
                           and t.started_at is not None and t.finished_at is not None], 99)

class LockedStore:
    """Any store, every call under one lock: how threads share a MemoryStore.

    A durable store is thread-safe on its own (a connection per thread or a pool), so the
    threaded runtime wraps only the in-memory one. Calls of a MemoryStore take microseconds,
    so holding a lock across them costs nothing a database round trip would.
    """

    def __init__(self, store: Any, lock: Any) -> None:
        self.inner = store
        self.lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        lock = self.lock

        def locked(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return attr(*args, **kwargs)

        self.__dict__[name] = locked  # built once per method
        return locked

    def __repr__(self) -> str:
        return f"LockedStore({self.inner!r})"


def _ascii_fold(text: str) -> str:
    """Lower case for ASCII letters only, as SQLite's LIKE folds."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
