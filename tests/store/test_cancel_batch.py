"""Cancel of a batch is one statement per store (issue 27, item 2).

A task-by-task cancel trailed the workers: on a live 20k batch they claimed and ran most of
it while it was being canceled. Every store now moves the whole batch at once, through the
transition table's CANCEL rule with the version bump, keeps its counts exact, and the
scheduler reports one event per task it canceled (and cancels their dependents).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.events import Event
from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec
from tests.store.backends import ALL_STORES, sqlite_store

S = TaskStatus


def _fill(sched: Scheduler) -> dict[str, Any]:
    """50 tasks in batch b (10 claimed, 5 of those done), 5 in batch other, and a task of
    batch other that depends on one of b."""
    b = sched.submit_batch([TaskSpec("k", task_id=f"b{i:02}") for i in range(50)], 1.0, "b")
    sched.submit_batch([TaskSpec("k", task_id=f"o{i}") for i in range(5)], 1.0, "other")
    sched.submit(TaskSpec("k", task_id="child", batch_id="other", depends_on=("b49",)), 1.0)
    claimed = sched.claim("w", 2.0, 10).tasks  # type: ignore[union-attr]
    assert {t.batch_id for t in claimed} == {"b"}
    for task in claimed[:5]:
        sched.complete(task, Outcome.success(None), 3.0)
    return {"tasks": b, "running": claimed[5:]}


@pytest.mark.parametrize("backend", sorted(ALL_STORES))
def test_cancel_batch_moves_every_live_task_once(backend: str, tmp_path: Path) -> None:
    with ALL_STORES[backend](tmp_path) as store:
        events: list[Event] = []
        sched = Scheduler(store, sinks=[events.append])
        made = _fill(sched)
        events.clear()
        assert sched.cancel_batch("b", 4.0, "operator") == 45
        counts = store.counts("b")
        assert counts[S.CANCELED] == 45 and counts[S.SUCCESS] == 5
        assert sum(counts.values()) == 50
        assert store.counts("other")[S.PENDING] == 5 and store.counts("other")[S.CANCELED] == 1
        assert store.counts()[S.CANCELED] == 46 and sum(store.counts().values()) == 56
        moves = [(e.task_id, e.src, e.dst) for e in events if e.dst is S.CANCELED]
        assert len(moves) == 46 and len({m[0] for m in moves}) == 46  # one event per task
        assert sorted(m[1] for m in moves if m[0].startswith("b")).count(S.RUNNING) == 5
        running = made["running"][0]
        stored = store.get(running.task_id)
        assert stored.status is S.CANCELED and stored.version == running.version + 1
        assert stored.error_msg == "operator" and stored.finished_at == 4.0
        sched.complete(running, Outcome.success(None), 5.0)  # its worker's late result
        assert store.get(running.task_id).status is S.CANCELED  # lost the version check
        assert store.get("child").status is S.CANCELED  # its upstream ended badly
        assert sched.cancel_batch("b", 6.0) == 0


def test_sqlite_cancels_a_batch_with_one_update_per_source_status(tmp_path: Path) -> None:
    with sqlite_store(tmp_path) as store:
        sched = Scheduler(store)
        _fill(sched)
        statements: list[str] = []
        conn = store._conn()
        conn.set_trace_callback(statements.append)
        try:
            assert sched.cancel_batch("b", 4.0) == 45
        finally:
            conn.set_trace_callback(None)
        # distinct statements the store sent (the trace repeats a statement for each row its
        # triggers run on); the dependent in the other batch is one more, on its own
        updates = {s for s in statements if s.lstrip().startswith("UPDATE tasks ")}
        assert len(updates) == 3, updates  # PENDING, RUNNING, the child: not one per task
