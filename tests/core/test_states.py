"""The transition table walked as data: reachability, closed terminals, typed errors."""

from __future__ import annotations

import pytest

from taskfuse.core.states import (
    BAD_ENDINGS,
    OPERATOR_EVENTS,
    TERMINAL,
    TRANSITIONS,
    BatchStatus,
    IllegalTransition,
    TaskEvent,
    TaskStatus,
    derive_batch_status,
    mermaid_diagram,
    next_status,
)
from taskfuse.core.task import Task, move


def test_every_status_is_reachable_from_pending() -> None:
    seen = {TaskStatus.PENDING}
    frontier = [TaskStatus.PENDING]
    while frontier:
        src = frontier.pop()
        for (s, _), dst in TRANSITIONS.items():
            if s is src and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert seen == set(TaskStatus)


def test_terminals_are_exactly_the_dead_ends_of_every_automatic_move() -> None:
    automatic = {s for s, e in TRANSITIONS if e not in OPERATOR_EVENTS}
    assert {s for s in TaskStatus if s not in automatic} == TERMINAL
    for status in TERMINAL:
        for event in TaskEvent:
            if event in OPERATOR_EVENTS and status in BAD_ENDINGS:
                continue
            with pytest.raises(IllegalTransition):
                next_status("t1", status, event)


def test_only_an_operator_reopens_and_only_what_ended_badly() -> None:
    reopen = {(s, e): d for (s, e), d in TRANSITIONS.items() if e in OPERATOR_EVENTS}
    assert reopen == {(s, TaskEvent.OPERATOR_RETRY): TaskStatus.PENDING for s in BAD_ENDINGS}
    with pytest.raises(IllegalTransition):
        next_status("t1", TaskStatus.SUCCESS, TaskEvent.OPERATOR_RETRY)
    for live in (TaskStatus.PENDING, TaskStatus.RUNNING):  # a second retry finds nothing to do
        with pytest.raises(IllegalTransition):
            next_status("t1", live, TaskEvent.OPERATOR_RETRY)


def test_operator_retry_keeps_the_error_and_stamps_who_and_when() -> None:
    t = Task("a", "k", max_retry=1)
    run = move(t, TaskEvent.CLAIM, 1.0, worker_id="w1")
    failed = move(run, TaskEvent.FAIL, 2.0, error_kind="http_401", error_msg="denied")
    back = move(failed, TaskEvent.OPERATOR_RETRY, 9.0)
    assert (back.status, back.version, back.finished_at, back.pending_since) == (
        TaskStatus.PENDING, 3, None, 9.0)
    assert (back.operator_retries, back.operator_retried_at) == (1, 9.0)
    assert (back.error_kind, back.error_msg, back.retry_count) == ("http_401", "denied", 0)
    again = move(move(move(back, TaskEvent.CLAIM, 10.0), TaskEvent.TIME_OUT, 11.0),
                 TaskEvent.OPERATOR_RETRY, 12.0)
    assert (again.operator_retries, again.operator_retried_at) == (2, 12.0)


def test_illegal_move_names_task_state_and_event() -> None:
    with pytest.raises(IllegalTransition) as info:
        next_status("sku-42", TaskStatus.PENDING, TaskEvent.SUCCEED)
    err = info.value
    assert (err.task_id, err.status, err.event) == ("sku-42", TaskStatus.PENDING, "succeed")
    assert "sku-42" in str(err) and "PENDING" in str(err) and "succeed" in str(err)


def test_bad_endings_are_terminal_and_exclude_success() -> None:
    assert BAD_ENDINGS < TERMINAL
    assert TaskStatus.SUCCESS not in BAD_ENDINGS


def test_move_stamps_fields_and_counts_retries() -> None:
    t = Task("a", "k", max_retry=2)
    running = move(t, TaskEvent.CLAIM, 5.0, worker_id="w1")
    assert (running.status, running.version, running.started_at, running.worker_id) == (
        TaskStatus.RUNNING, 1, 5.0, "w1"
    )
    again = move(running, TaskEvent.RETRY, 6.0, not_before=7.0)
    assert (again.status, again.retry_count, again.worker_id, again.started_at) == (
        TaskStatus.PENDING, 1, None, None
    )
    released = move(move(again, TaskEvent.CLAIM, 8.0), TaskEvent.RELEASE, 9.0)
    assert released.retry_count == 1  # a shutdown is not an attempt used up
    done = move(move(released, TaskEvent.CLAIM, 10.0), TaskEvent.SUCCEED, 11.0, result=3)
    assert (done.finished_at, done.result, done.version) == (11.0, 3, 6)
    assert t.status is TaskStatus.PENDING and t.version == 0  # the original is untouched


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({TaskStatus.PENDING: 1, TaskStatus.SUCCESS: 3}, BatchStatus.RUNNING),
        ({TaskStatus.RUNNING: 1}, BatchStatus.RUNNING),
        ({TaskStatus.SUCCESS: 3}, BatchStatus.ALL_SUCCESS),
        ({TaskStatus.SUCCESS: 2, TaskStatus.FAILED: 1}, BatchStatus.PARTIAL_SUCCESS),
        ({TaskStatus.SUCCESS: 1, TaskStatus.CANCELED: 1}, BatchStatus.PARTIAL_SUCCESS),
        ({TaskStatus.CANCELED: 2}, BatchStatus.CANCELED),
        ({TaskStatus.FAILED: 1, TaskStatus.CANCELED: 2}, BatchStatus.FAILED),
        ({TaskStatus.TIMEOUT: 1}, BatchStatus.FAILED),
        ({}, BatchStatus.EMPTY),
        ({TaskStatus.SUCCESS: 0, TaskStatus.FAILED: 0}, BatchStatus.EMPTY),
    ],
)
def test_batch_status_derivation(counts, expected) -> None:
    assert derive_batch_status(counts) is expected


def test_diagram_lists_every_move() -> None:
    text = mermaid_diagram()
    assert text.count("-->") == len(TRANSITIONS) + 1 + len(TERMINAL)
