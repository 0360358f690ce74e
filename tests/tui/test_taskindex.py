"""The event index: tasks by state at a time, search, one task's history, alerts."""

from __future__ import annotations

import numpy as np
import pytest

from taskfuse.trace import read_trace
from tests.tui.tracegen import Incident
from tui.taskindex import STATES, Decoder, TaskIndex


def _index(inc: Incident, chunk: int = 250) -> TaskIndex:
    tr = read_trace(inc.path)
    dec, ix = Decoder(), TaskIndex()
    for a in range(0, tr.n_events, chunk):
        ix.extend(dec.decode([c[a : a + chunk] for c in tr.event_columns]))
    return ix


@pytest.fixture(scope="module")
def index(incident: Incident) -> TaskIndex:
    return _index(incident)


def test_codes_are_stable_across_chunks(incident: Incident) -> None:
    """Chunk boundaries must not change anything: one chunk or many give the same answers."""
    one, many = _index(incident, chunk=10**9), _index(incident, chunk=97)
    assert one.words == many.words
    for t in (0.0, incident.gateway_open, incident.t_end):
        assert one.counts_at(t) == many.counts_at(t)
        assert one.tasks_at(t, "PENDING", limit=5) == many.tasks_at(t, "PENDING", limit=5)


def test_final_counts_match_the_run(index: TaskIndex, incident: Incident) -> None:
    assert index.counts_at(incident.t_end + 1) == incident.final_counts
    assert index.n_tasks == incident.n_tasks


def test_counts_at_agree_with_the_timeline(index: TaskIndex, incident: Incident) -> None:
    """Checkpointed counts equal the series the writer sampled, at every sample."""
    tr = read_trace(incident.path)
    times, depth = tr.series("queue_depth")
    _, running = tr.series("running")
    for k in range(0, len(times), 7):
        counts = index.counts_at(float(times[k]))
        assert counts["PENDING"] == depth[k]
        assert counts["RUNNING"] == running[k]


def test_tasks_at_filters_by_state_and_counts(index: TaskIndex, incident: Incident) -> None:
    t = incident.gateway_open
    counts = index.counts_at(t)
    for state in STATES:
        rows, total = index.tasks_at(t, state, limit=10)
        assert total == counts[state]
        assert all(r.state == state for r in rows)
        assert len(rows) == min(10, total)
    rows, total = index.tasks_at(t, None, limit=10_000)
    assert total == sum(counts.values())
    assert [r.since for r in rows] == sorted((r.since for r in rows), reverse=True)


def test_search_by_task_id_and_trace_id(index: TaskIndex, incident: Incident) -> None:
    task = incident.task_ids[42]
    trace = incident.trace_of[task]
    rows, total = index.tasks_at(incident.t_end + 1, None, task)
    assert total == 1 and rows[0].task_id == task
    siblings = {t for t, tr in incident.trace_of.items() if tr == trace}
    rows, total = index.tasks_at(incident.t_end + 1, None, trace)
    assert {r.task_id for r in rows} == siblings and total == len(siblings)
    assert index.resolve(trace) in siblings
    assert index.resolve("no-such-thing") is None


def test_history_of_a_failed_task(index: TaskIndex, incident: Incident) -> None:
    rows, _ = index.tasks_at(incident.t_end + 1, "FAILED", limit=1)
    h = index.history(rows[0].task_id)
    assert h is not None
    assert h.state == "FAILED"
    assert h.rows[0].kind == "submit" and h.rows[-1].dst == "FAILED"
    assert h.attempts >= 1
    assert h.errors and h.errors[-1] == rows[0].reason
    assert h.trace_id == incident.trace_of[h.task_id]
    assert h.queued_s > 0 and h.running_s > 0


def test_history_up_to_the_cursor_hides_the_future(index: TaskIndex, incident: Incident) -> None:
    task = incident.task_ids[-5]
    full = index.history(task)
    assert full is not None
    early = index.history(task, t=full.rows[0].t)
    assert early is not None and len(early.rows) == 1 and early.state == "PENDING"
    assert index.history("t9999999") is None


def test_alerts_fire_and_resolve(index: TaskIndex, incident: Incident) -> None:
    assert index.alerts_at(0.0) == []
    firing = index.alerts_at(incident.gateway_open + 1)
    assert {a.rule for a in firing} == {"success_rate_low", "queue_depth_high"}
    assert index.alerts_at(incident.t_end + 1) == []


def test_a_chunk_out_of_order_is_sorted_on_decoding() -> None:
    cols: list[list[object]] = [[2.0, 1.0], ["submit", "submit"], ["b", "a"], [None, None],
                                [None, None], [None, None], ["PENDING", "PENDING"],
                                [None, None], [1, 1], [None, None], [None, None], [None, None]]
    chunk = Decoder().decode(cols)
    assert list(chunk.t) == [1.0, 2.0]
    ix = TaskIndex()
    ix.extend(chunk)
    assert ix.counts_at(1.5)["PENDING"] == 1
    assert np.array_equal(ix.find("a"), [1])  # codes follow first appearance in the file


def test_every_row_names_its_trace_and_batch_though_only_submits_carry_them(
        lab_incident) -> None:
    """The lab writes trace_id on SUBMIT events only; RUNNING and SUCCESS rows (from MOVE
    events) still show the task's trace and batch."""
    tr = read_trace(lab_incident)
    moves = [e for e in tr.events(kind="move") if e.dst in ("RUNNING", "SUCCESS")]
    assert moves and all(e.trace_id is None for e in moves)  # the premise
    ix = TaskIndex()
    dec = Decoder()
    ix.extend(dec.decode(tr.event_columns))
    submits = {e.task_id: e.trace_id for e in tr.events(kind="submit")}
    for state, t in (("RUNNING", 100.0), ("SUCCESS", 200.0)):
        rows, total = ix.tasks_at(t, state, limit=50)
        assert total and rows
        assert all(r.trace_id == submits[r.task_id] and r.batch_id == "skus" for r in rows)
