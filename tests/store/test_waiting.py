"""Waiting for results on SQLite and PostgreSQL: woken by the store, not by polling.

Workers are real processes (tests/store/procs.py); the waiter is this process. A wait that
was not woken by the store would only notice the end at its idle check: the tests make that
30 s and assert the wait returned well before it, which holds however slow the machine is.
"""

from __future__ import annotations

import time

import pytest

from taskfuse import cli
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import RESULT_TOO_LARGE, Scheduler, SchedulerConfig, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.runtime.waiting import WaitError, wait
from taskfuse.store import open_store
from tests.store import procs
from tests.store.test_processes import CTX, Backend, _join

IDLE_CHECK_S = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    made = Backend(request.param, tmp_path)
    yield made
    made.cleanup()


def _workers(backend, n: int) -> list:
    out = [CTX.Process(target=procs.drain, args=(backend.url, backend.effects, f"w{i}"),
                       kwargs={"batch": 8, "idle_exit_s": 5.0}) for i in range(n)]
    for w in out:
        w.start()
    return out


def test_wait_for_a_batch_and_a_lone_task_ended_by_other_processes(backend) -> None:
    store = open_store(backend.url)
    sched = Scheduler(store)
    now = time.time()
    sched.submit_batch([TaskSpec("effect", task_id=f"b{i}") for i in range(400)], now, "b")
    workers = _workers(backend, 2)
    got = wait(store, "b", 120.0, idle_check_s=IDLE_CHECK_S)
    ended_last = max(t.finished_at for t in store.batch_tasks("b"))
    assert (got.done, got.status, got.counts[TaskStatus.SUCCESS]) == (True, "ALL_SUCCESS", 400)
    assert time.time() >= ended_last  # it did not answer before the end
    # no batch, held back 2 s: it ends while we wait for it (the workers idle 5 s first)
    not_before = time.time() + 2.0
    sched.submit(TaskSpec("effect", task_id="lone", not_before=not_before), time.time())
    lone = wait(store, "lone", 120.0, idle_check_s=IDLE_CHECK_S)
    assert (lone.done, lone.status) == (True, "SUCCESS")
    # it ran no sooner than it was held to, and the wait (begun a moment after the submit,
    # so its own count may read a hair under 2 s) saw it end at once
    assert lone.task is not None and lone.task.started_at >= not_before
    assert time.time() >= lone.task.finished_at
    assert lone.waited_s < IDLE_CHECK_S  # woken by the store, not by the idle check
    _join(workers, 120)
    store.close()


def test_wait_and_result_commands_exit_by_outcome(backend, capsys) -> None:
    store = open_store(backend.url)
    sched = Scheduler(store, policy=RetryPolicy(max_retry=0),
                      config=SchedulerConfig(max_result_bytes=64))
    now = time.time()
    sched.submit_many([TaskSpec("k", task_id=t) for t in ("ok", "bad", "huge", "todo")], now)
    work = sched.claim("w", now, 3)
    assert isinstance(work, Work)
    outcomes = {"ok": Outcome.success({"n": 1}), "bad": Outcome.failure("http_401", "denied"),
                "huge": Outcome.success("x" * 100)}
    for task in work.tasks:
        sched.complete(task, outcomes[task.task_id], now)
    huge = store.get("huge")
    assert (huge.status, huge.error_kind, huge.result) == (TaskStatus.FAILED, RESULT_TOO_LARGE,
                                                           None)
    assert "102 bytes is over the limit of 64 bytes" in huge.error_msg
    url = ["--store", backend.url]
    assert cli.main(["result", *url, "ok"]) == 0
    assert capsys.readouterr().out == '{"n": 1}\n'
    assert cli.main(["result", *url, "bad"]) == 3
    assert "ended FAILED: http_401: denied" in capsys.readouterr().err
    assert cli.main(["result", *url, "todo"]) == 7
    assert cli.main(["wait", *url, "bad", "--json"]) == 3
    assert '"error_kind": "http_401"' in capsys.readouterr().out
    assert cli.main(["wait", *url, "todo", "--timeout", "0.2"]) == 124
    assert "task todo still PENDING" in capsys.readouterr().out
    assert cli.main(["wait", *url, "nope"]) == 2
    with pytest.raises(WaitError):
        wait(store, "nope", 1.0)
    store.close()


def test_sqlite_done_wakeup_keeps_a_commit_made_between_two_waits(tmp_path) -> None:
    """A waiter asks the store, then sleeps in wait_for_done: a commit that lands between
    the two (another connection's) must still wake it. wait_for_done compares with the
    version its thread saw at its previous call; it compared with the version at its own
    start, and such an end then waited for the next commit or the idle check."""
    from taskfuse.store.sqlite import SQLiteStore

    waiter, worker = SQLiteStore(tmp_path / "w.db"), SQLiteStore(tmp_path / "w.db")
    try:
        assert waiter.wait_for_done(0.0) is False  # armed: nothing committed since
        worker.insert([Task("t", "k", trace_id="t", created_at=1.0)])  # between two waits
        assert waiter.wait_for_done(30.0) is True  # at once, not after 30 s
        assert waiter.wait_for_done(0.0) is False  # and seen once only
    finally:
        waiter.close()
        worker.close()
