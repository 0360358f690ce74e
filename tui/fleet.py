"""The fleet view's data: what one poll of a store says, and the charts grown from the polls.

Why this exists: with many worker processes on one database there is no single trace to
follow, so the store itself is the source of truth. A poll asks only the stores' read-only
queries (counts, batch_ids, running); this module turns those answers into the very shapes
the trace monitor's widgets already render (`Overview`, `BatchRow`, `TaskRow`), so the fleet
view reuses those widgets instead of growing its own. Nothing here reads a clock: the time of
a poll is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from taskfuse.core.states import TaskStatus
from tui.model import CHART_COLUMNS, TERMINAL_STATES, BatchRow, Overview, Timeline
from tui.taskindex import TaskRow

if TYPE_CHECKING:  # the monitor uses a store's read-only queries, never its writes
    from taskfuse.core.storeapi import Store
    from taskfuse.core.task import Task

#: The series a poll adds to the timeline (the names the trace format uses for the same).
SERIES: tuple[str, ...] = (
    "queue_depth", "running", "running_limit", "submitted", "throughput", "success_rate",
    *(f"done.{s}" for s in TERMINAL_STATES),
)
#: The charts show the last this many seconds of polls.
WINDOW_S = 600.0


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


@dataclass(frozen=True, slots=True)
class FleetSample:
    """One poll: counts by state (all tasks and per batch) and the RUNNING tasks."""

    t: float
    counts: Mapping[str, int]
    batches: tuple[BatchRow, ...]
    running: tuple[RunningTask, ...]


def _by_name(counts: Mapping[TaskStatus, int]) -> dict[str, int]:
    return {TaskStatus(s).value: int(n) for s, n in counts.items()}


def poll_store(store: Store, now: float) -> FleetSample:
    """Ask the store what the fleet is doing (read-only queries only; may raise StoreError)."""
    counts = _by_name(store.counts())
    batches = tuple(
        BatchRow(b, _by_name(store.counts(b)), None) for b in sorted(store.batch_ids())
    )
    running = tuple(
        RunningTask(t.task_id, t.kind, t.batch_id, t.trace_id, t.worker_id, t.started_at,
                    t.retry_count + 1)
        for t in sorted(store.running(), key=lambda t: (t.started_at or 0.0, t.task_id))
    )
    return FleetSample(now, counts, batches, running)


def running_rows(sample: FleetSample) -> list[TaskRow]:
    """The RUNNING tasks as task-table rows: `since` carries the age, `reason` the kind."""
    return [
        TaskRow(r.task_id, "RUNNING", max(0.0, sample.t - r.started_at) if r.started_at else 0.0,
                r.attempt, r.batch_id, r.trace_id or None, r.worker_id, r.kind)
        for r in sorted(sample.running, key=lambda r: r.started_at or sample.t)
    ]


def task_lines(task: Task, now: float) -> list[tuple[str, str]]:
    """One task's record as (label, value) lines for the lookup view."""
    def ago(t: float | None) -> str:
        return "–" if t is None else f"{max(0.0, now - t):.1f}s ago"

    return [
        ("task", task.task_id), ("trace", task.trace_id or "–"),
        ("state", task.status.value), ("kind", task.kind), ("batch", task.batch_id or "–"),
        ("worker", task.worker_id or "–"),
        ("attempt", f"{task.retry_count + 1} of {task.max_retry + 1}"),
        ("created", ago(task.created_at)), ("started", ago(task.started_at)),
        ("finished", ago(task.finished_at)), ("heartbeat", ago(task.heartbeat_at)),
        ("timeout", f"{task.timeout:g}s"),
        ("depends on", ", ".join(task.depends_on) or "–"),
        ("error", f"{task.error_kind}: {task.error_msg}" if task.error_kind else "–"),
    ]


class FleetModel:
    """The polls so far: the latest sample, plus a timeline of the numbers the charts need.

    Owned by the UI thread; the polling thread hands it samples in messages.
    """

    def __init__(self) -> None:
        self.timeline = Timeline(list(SERIES))
        self.latest: FleetSample | None = None
        self._prev: FleetSample | None = None

    def add(self, sample: FleetSample) -> None:
        prev, self._prev, self.latest = self.latest, self.latest, sample
        c = sample.counts
        finished = sum(c.get(s, 0) for s in TERMINAL_STATES)
        throughput = np.nan
        if prev is not None and sample.t > prev.t:
            before = sum(prev.counts.get(s, 0) for s in TERMINAL_STATES)
            throughput = max(0.0, finished - before) / (sample.t - prev.t)
        ok = c.get("SUCCESS", 0) / finished if finished else np.nan
        row = [c.get("PENDING", 0), c.get("RUNNING", 0), np.nan, sum(c.values()), throughput,
               ok, *(c.get(s, 0) for s in TERMINAL_STATES)]
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
        return Overview(
            v("queue_depth", i), v("running", i), None, v("submitted", i),
            {s: v(f"done.{s}", i) for s in TERMINAL_STATES}, v("throughput", i),
            v("success_rate", i),
            tl.chart("queue_depth", i, t0, t1, width), tl.chart("running", i, t0, t1, width),
            tl.chart("running_limit", i, t0, t1, width),
        )
