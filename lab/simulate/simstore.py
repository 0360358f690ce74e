"""The simulator's store: a MemoryStore that forgets a task once it ended, keeping a flat record.

A simulation reads nothing of an ended task again: the report and the timeline take counts by
status (the store keeps them), a duration per ended task (the metrics, fed from here) and one
flat record per task. Keeping every 23-field record alive cost a 300,000-task run memory and
time that grew with its size, so `LabStore` drops the record at its terminal move and keeps
a tuple (`TaskRecord`'s fields) instead, converted to named records only when asked.

What it keeps anyway: a task with an idempotency key (a later duplicate must find it, as in
any store). A forgotten task reads as unknown: `get` answers None, so a late result loses
its race and `is_cancelled` is true, exactly as for any ended task; a later submission may
not depend on it. Heap entries that still name it are stale and dropped when met, because
a forgotten id reads as a record no entry matches (`_Live.__missing__`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from taskfuse.core.metrics import NO_BATCH, MetricsAggregator
from taskfuse.core.states import TERMINAL, TaskStatus
from taskfuse.core.task import Task
from taskfuse.store.memory import MemoryStore


class TaskRecord(NamedTuple):
    """What is kept of a task: where it ended and when (Ciw's flat data records)."""

    task_id: str
    kind: str
    batch_id: str | None
    status: TaskStatus
    retry_count: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    error_kind: str | None
    depends_on: tuple[str, ...]


def record_of(task: Task) -> TaskRecord:
    return TaskRecord(task.task_id, task.kind, task.batch_id, task.status, task.retry_count,
                      task.created_at, task.started_at, task.finished_at, task.error_kind,
                      task.depends_on)


#: What a forgotten id reads as inside the store: a version no heap entry carries.
_FORGOTTEN = Task("", "", status=TaskStatus.CANCELED, version=-1)


class _Live(dict[str, Task]):
    """The live records by id; a forgotten id reads as `_FORGOTTEN` (`.get` still says None)."""

    __slots__ = ()

    def __missing__(self, task_id: str) -> Task:
        return _FORGOTTEN


class _NoIndex(dict[str, list[str]]):
    """A trace-id index that keeps nothing: the simulator never looks a task up by trace id,
    and a list per task was a tenth of the store's memory. `LabStore.find` scans instead."""

    __slots__ = ()

    def __missing__(self, trace_id: str) -> list[str]:
        return []


class LabStore(MemoryStore):
    """MemoryStore that keeps only live tasks (and keyed ones); see the module docstring.

    `on_end(batch, t, duration)` is told of every task that ended from RUNNING, in the
    order the moves happen: the metrics' durations, without an event per move.
    """

    def __init__(self, on_end: Callable[[str, float, float], None] | None = None) -> None:
        super().__init__()
        self._tasks = _Live()
        self._by_trace = _NoIndex()  # type: ignore[assignment]
        self._ended: list[tuple[object, ...]] = []
        self._on_end = on_end
        #: Tasks per status, live and ended: the store's own counters (read, never written).
        self.status_counts = self._counts
        #: An attempt claimed ahead (claim_batch > 1), by task: its claim time and the seconds
        #: it waited for its worker. Its run time counts from when it began, as the runtime's
        #: does (a WAIT for a thread); an entry of an earlier attempt is ignored at the end.
        self.waited: dict[str, tuple[float, float]] = {}

    def swap(self, new: Task, expected_version: int) -> bool:
        if not MemoryStore.swap(self, new, expected_version):
            return False
        if new.status in TERMINAL:
            self._end(new)
        return True

    def _end(self, task: Task) -> None:
        started, finished = task.started_at, task.finished_at
        tid = task.task_id
        if started is not None and self._on_end is not None:  # it ended from RUNNING
            late = self.waited.pop(tid, None) if self.waited else None
            began = started + late[1] if late is not None and late[0] == started else started
            self._on_end(task.batch_id or NO_BATCH, finished, finished - began)  # type: ignore[operator]
        self._ended.append((tid, task.kind, task.batch_id, task.status, task.retry_count,
                            task.created_at, started, finished, task.error_kind,
                            task.depends_on))
        if task.idempotency_key is None:
            del self._tasks[tid]

    def find(self, id_or_trace: str) -> list[Task]:
        """Live tasks by id or trace id: a scan (the simulator keeps no trace index)."""
        return [t for t in self._tasks.values()
                if id_or_trace in (t.task_id, t.trace_id)]

    def dependents(self, task_id: str) -> list[Task]:
        live = self._tasks
        return [live[c] for c in self._children.get(task_id, ()) if c in live]

    def records(self) -> list[TaskRecord]:
        """Every task: those that ended (in the order they ended), then the live ones."""
        ended = {r[0] for r in self._ended}
        out = [TaskRecord(*r) for r in self._ended]  # type: ignore[arg-type]
        out += [record_of(t) for t in self._tasks.values() if t.task_id not in ended]
        return out


class StoreMetrics(MetricsAggregator):
    """The four metrics kept from the store instead of from events: counts are the store's
    own, durations arrive through its `on_end`. The same numbers as the event sink (every
    status change is a swap, every ended attempt a terminal swap), but a run without a trace
    then builds no event at all."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = self._add_duration

    def attach(self, store: LabStore) -> None:
        self.counts = store.status_counts  # type: ignore[assignment]  # StrEnum keys read as str
