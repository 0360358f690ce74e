"""The process executor with real task processes: killed when an attempt must stop, replaced,
and otherwise indistinguishable from a thread task (results, errors, logs, fuses).

Tasks tell the test that they really run (and in which process) by connecting to a socket
(`Listener`), so no test sleeps and hopes.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from taskfuse.core.events import EventKind, EventList
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, Runner, RuntimeConfigError
from taskfuse.runtime.logs import JsonFormatter
from taskfuse.store.memory import MemoryStore
from tests.runtime import procexec_app as tasks
from tests.runtime.conftest import JOIN_S


class Listener:
    """A local TCP socket task functions connect to: an accepted connection proves a task
    is running now, and its first line says something about it (a pid, a task id)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(JOIN_S)
        self.port: int = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []

    def accept(self) -> tuple[socket.socket, str]:
        conn, _ = self.sock.accept()
        conn.settimeout(JOIN_S)
        self.conns.append(conn)
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(256)
            assert chunk, "the task hung up before saying anything"
            line += chunk
        return conn, line.decode().strip()

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


def alive(pid: int) -> bool:
    """Whether `pid` is a process that can still run code (a zombie cannot)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def process_app(**kinds: Any) -> App:
    """An App whose kinds run `procexec_app` functions in task processes."""
    app = App("procexec")
    for kind, (fn, options) in kinds.items():
        app.task(kind, **{"executor": "process", **options})(fn)
    return app


# -- killed, reaped, replaced --------------------------------------------------------------


def test_a_hung_task_times_out_its_process_dies_and_a_new_one_serves_next(
        make_runner, listener) -> None:
    app = process_app(hang=(tasks.hang, {"timeout": 1, "max_retry": 0}), pid=(tasks.pid, {}))
    runner = make_runner(app, workers=1)  # its task process imported the code at start
    hung = runner.submit("hang", {"port": listener.port})
    _, line = listener.accept()
    hung_pid = int(line)
    assert hung_pid in runner.procs.pids() and hung_pid != os.getpid()
    after = runner.submit("pid")  # one worker thread: it runs only once the thread is free
    assert runner.join(JOIN_S)

    hung, after = runner.get(hung.task_id), runner.get(after.task_id)
    assert hung.status is TaskStatus.TIMEOUT
    assert hung.finished_at - hung.started_at <= hung.timeout + 1.0
    assert not alive(hung_pid)
    assert after.status is TaskStatus.SUCCESS and after.result != hung_pid
    assert after.started_at - hung.finished_at < 1.0  # the thread was free at the timeout
    assert runner.procs.pids() == [after.result] and runner.procs.killed == 1


@pytest.mark.slow
def test_a_hundred_hung_tasks_leave_the_pool_at_full_size(make_runner) -> None:
    app = process_app(hang=(tasks.hang, {"timeout": 0.2, "max_retry": 0}), pid=(tasks.pid, {}))
    runner = make_runner(app, workers=2)
    runner.submit_many([runner.spec("hang") for _ in range(100)])
    assert runner.join(120)
    assert runner.counts()[TaskStatus.TIMEOUT] == 100
    # The store says TIMEOUT at the deadline; each thread then kills, replaces and returns.
    _wait(lambda: runner.stats.discarded == 100, "every thread to be back from its kill")
    assert runner.procs.killed == 100
    pool = runner.procs.pids()
    assert len(pool) == 2 and all(alive(pid) for pid in pool)
    after = runner.submit_many([runner.spec("pid") for _ in range(4)])
    assert runner.join(JOIN_S)
    assert {runner.get(t.task_id).status for t in after} == {TaskStatus.SUCCESS}
    assert {runner.get(t.task_id).result for t in after} <= set(pool)
    assert sorted(runner.procs.pids()) == sorted(pool)  # the same two processes, still there


def test_cancel_kills_the_running_process(make_runner, listener) -> None:
    app = process_app(hang=(tasks.hang, {"timeout": 60}), pid=(tasks.pid, {}))
    runner = make_runner(app, workers=1)
    hung = runner.submit("hang", {"port": listener.port})
    hung_pid = int(listener.accept()[1])
    assert runner.cancel(hung.task_id) is not None
    after = runner.submit("pid")
    assert runner.join(JOIN_S)
    assert runner.get(hung.task_id).status is TaskStatus.CANCELED
    assert runner.get(after.task_id).status is TaskStatus.SUCCESS
    assert not alive(hung_pid)


def test_shutdown_releases_the_running_task_and_kills_every_task_process(
        make_runner, listener) -> None:
    app = process_app(hang=(tasks.hang, {"timeout": 60}), pid=(tasks.pid, {}))
    runner = make_runner(app, workers=2)
    hung = runner.submit("hang", {"port": listener.port})
    hung_pid = int(listener.accept()[1])
    [quick] = runner.submit_batch([runner.spec("pid")], "quick")
    assert runner.join(JOIN_S, batch_id="quick")
    pids = runner.procs.pids()
    assert hung_pid in pids and runner.get(quick.task_id).result in pids

    released = runner.shutdown(grace_s=0.2)
    assert [t.task_id for t in released] == [hung.task_id]
    assert runner.get(hung.task_id).status is TaskStatus.PENDING
    assert runner.procs.pids() == []
    assert [pid for pid in pids if alive(pid)] == []


def test_a_crashed_task_process_is_a_retryable_failure_and_is_replaced(make_runner) -> None:
    app = process_app(crash=(tasks.exit_hard, {"max_retry": 1}), pid=(tasks.pid, {}))
    runner = make_runner(app, workers=1)
    task = runner.submit("crash")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.retry_count == 1
    assert final.error_kind == "process_died" and "exited with code 3" in final.error_msg
    assert runner.procs.killed == 2
    after = runner.submit("pid")
    assert runner.join(JOIN_S) and runner.get(after.task_id).status is TaskStatus.SUCCESS


def test_a_task_process_inherits_no_open_file_of_its_worker(make_runner, tmp_path) -> None:
    from taskfuse.store import open_store

    db = tmp_path / "tasks.db"
    app = process_app(pid=(tasks.pid, {}))
    runner = make_runner(app, store=open_store(f"sqlite:///{db}"), workers=1)
    task = runner.submit("pid")
    assert runner.join(JOIN_S)
    child = runner.get(task.task_id).result
    assert any(str(db) in target for target in _open_files(os.getpid()))  # the worker's
    assert not any(str(db) in target for target in _open_files(child))
    assert not any(target.startswith("TCP") for target in _open_files(child))


def _open_files(pid: int) -> list[str]:
    folder = f"/proc/{pid}/fd"
    targets = []
    for fd in os.listdir(folder):
        try:
            targets.append(os.readlink(f"{folder}/{fd}"))
        except OSError:
            continue
    return targets


# -- the same answers as a thread ----------------------------------------------------------


def test_the_context_tells_a_process_task_what_it_tells_a_thread(make_runner) -> None:
    app = process_app(facts=(tasks.context_facts, {"timeout": 30}))
    runner = make_runner(app, workers=1)
    task = runner.submit("facts", {"sku": "A1"})
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    facts = final.result
    assert final.status is TaskStatus.SUCCESS
    assert facts["pid"] != os.getpid()
    assert (facts["task_id"], facts["trace_id"], facts["kind"], facts["attempt"]) == (
        task.task_id, task.trace_id, "facts", 1)
    assert facts["payload"] == {"sku": "A1"}
    assert facts["deadline"] == pytest.approx(final.started_at + 30)
    assert facts["traceparent"].split("-")[1].endswith(task.trace_id)
    assert facts["headers"]["X-A"] == "1" and "traceparent" in facts["headers"]
    assert facts["cancelled"] is False and facts["heartbeat"] is True
    assert facts["slept_through"] is True


ERRORS = [
    (tasks.raise_task_error, {"kind": "bad_params", "message": "sku missing"}),
    (tasks.raise_value_error, 7),
    (tasks.raise_timeout, None),
    (tasks.call_unknown_downstream, None),
]


@pytest.mark.parametrize(("fn", "payload"), ERRORS, ids=lambda x: getattr(x, "__name__", ""))
def test_errors_end_as_they_end_on_a_thread(make_runner, fn, payload) -> None:
    app = App()
    app.downstream("db", bulkhead=1)
    app.task("on_thread", max_retry=0)(fn)
    app.task("in_process", max_retry=0, executor="process")(fn)
    runner = make_runner(app, workers=2)
    on_thread = runner.submit("on_thread", payload)
    in_process = runner.submit("in_process", payload)
    assert runner.join(JOIN_S)
    a, b = runner.get(on_thread.task_id), runner.get(in_process.task_id)
    assert a.status is b.status is TaskStatus.FAILED
    assert (a.error_kind, a.error_msg) == (b.error_kind, b.error_msg)


def test_logs_come_back_with_the_trace_id(make_runner, caplog) -> None:
    app = process_app(log=(tasks.log_lines, {}))
    runner = make_runner(app, workers=1)
    with caplog.at_level(logging.INFO):
        task = runner.submit("log", "sku-1")
        assert runner.join(JOIN_S)
    assert runner.get(task.task_id).result == "logged"
    records = {r.getMessage(): r for r in caplog.records if r.process != os.getpid()}
    hello, library, failed = (records["hello sku-1"], records["a library speaks"],
                              records["with a traceback"])
    for record in (hello, library, failed):
        assert (record.trace_id, record.task_id) == (task.trace_id, task.task_id)
    assert hello.name == "taskfuse.task.log" and hello.sku == "sku-1" and hello.attempt == 1
    assert library.name == "some.library" and library.levelno == logging.WARNING
    line = json.loads(JsonFormatter().format(failed))
    assert line["trace_id"] == task.trace_id and line["level"] == "ERROR"
    assert "ZeroDivisionError" in line["error"]


def test_warnings_and_thread_deaths_come_back_as_log_records(make_runner, caplog) -> None:
    """Not as raw text on the worker's stderr, which would break its log format."""
    runner = make_runner(process_app(speak=(tasks.python_speaks, {})), workers=1)
    with caplog.at_level(logging.INFO):
        task = runner.submit("speak", "sku-2")
        assert runner.join(JOIN_S)
    assert runner.get(task.task_id).result == "spoke"
    theirs = [r for r in caplog.records if r.process != os.getpid()]
    warned = [r for r in theirs if r.name == "py.warnings"]
    died = [r for r in theirs if r.name == "threading"]
    assert warned and "old api used by sku-2" in warned[0].getMessage()
    assert died and died[0].getMessage() == "uncaught exception in thread helper"
    assert "a helper thread of sku-2 failed" in (died[0].exc_text or "")


# -- the fuses -----------------------------------------------------------------------------


def test_a_bulkhead_of_one_holds_across_two_process_tasks(make_runner, listener) -> None:
    app = App()
    app.downstream("db", bulkhead=1)
    # Not declared: a runner claims no task declaring a downstream whose bulkhead its held
    # tasks fill, so the second would not be claimed, and not queue, until the first is done.
    app.task("hold", executor="process")(tasks.hold_downstream)
    events = EventList()
    runner = make_runner(app, workers=2, sinks=[events])
    first, second = runner.submit_many([runner.spec("hold", {"port": listener.port})] * 2)
    bulkhead = runner.scheduler.guards["db"].bulkhead

    conn, line = listener.accept()
    inside = line.split()[1]
    _wait(lambda: bulkhead.waiting == 1, "the other task to queue for the permit")
    assert bulkhead.in_use == 1
    conn.sendall(b"!")
    conn, line = listener.accept()
    assert line.split()[1] != inside and {inside, line.split()[1]} == {first.task_id,
                                                                         second.task_id}
    conn.sendall(b"!")
    assert runner.join(JOIN_S)

    assert [runner.get(t.task_id).result for t in (first, second)] == ["released"] * 2
    assert bulkhead.max_in_use == 1 and bulkhead.in_use == 0
    calls = events.of_kind(EventKind.CALL)
    assert sorted(e.task_id for e in calls) == sorted([first.task_id, second.task_id])
    assert {e.reason for e in calls} == {"ok"} and all(e.value > 0 for e in calls)
    [wait] = [e for e in events.of_kind(EventKind.WAIT) if e.reason == "bulkhead"]
    assert wait.task_id != inside and wait.subject == "db"


def test_a_failed_call_is_recorded_with_its_error_kind(make_runner) -> None:
    app = App()
    app.downstream("db", bulkhead=2)
    app.task("call", executor="process", downstreams=["db"])(tasks.failing_call)
    events = EventList()
    runner = make_runner(app, workers=1, sinks=[events])
    task = runner.submit("call")
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).result == "survived"
    [call] = events.of_kind(EventKind.CALL)
    assert call.reason == "connection_reset" and call.subject == "db"
    assert runner.scheduler.guards["db"].in_flight == 0


def test_a_call_cut_short_by_a_kill_gives_its_permit_back(make_runner, listener) -> None:
    app = App()
    app.downstream("db", bulkhead=1)
    app.task("hold", executor="process", timeout=60)(tasks.hold_downstream)
    events = EventList()
    runner = make_runner(app, workers=1, sinks=[events])
    task = runner.submit("hold", {"port": listener.port})
    listener.accept()
    runner.cancel(task.task_id)
    _wait(lambda: events.of_kind(EventKind.CALL), "the cut call to be recorded")
    [call] = events.of_kind(EventKind.CALL)
    assert call.reason == "canceled"
    assert runner.scheduler.guards["db"].bulkhead.in_use == 0


# -- ctx.downstream(name).call: the client's whole policy ----------------------------------

_FIXED = {"kind": "fixed", "base": 0.001, "jitter": "none"}


def _scripted(executor: str) -> Any:
    """The scripted call task for `executor`: a coroutine on the event loop for async."""
    return tasks.scripted_call_async if executor == "async" else tasks.scripted_call


@pytest.mark.parametrize("executor", ["thread", "process", "async"])
def test_a_call_is_retried_by_the_clients_policy_on_either_executor(make_runner,
                                                                    executor) -> None:
    app = App()
    app.downstream("partner", timeout_s=0.5, retry={"max_retry": 3, "backoff": _FIXED})
    app.task("sync", max_retry=0, executor=executor)(_scripted(executor))
    events = EventList()
    runner = make_runner(app, workers=1, sinks=[events])
    task = runner.submit("sync", {"fail": ["http_429", "http_503"]})
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.SUCCESS, final.error_msg
    assert final.result == [0.5, 0.5, 0.5]  # every attempt got timeout= from the limits
    calls = [e.reason for e in events.of_kind(EventKind.CALL)]
    assert calls == ["http_429", "http_503", "ok"]  # each attempt through the fuses
    assert runner.clients["partner"].retries == 2


@pytest.mark.parametrize("executor", ["thread", "process", "async"])
def test_a_call_that_fails_for_good_fails_the_attempt_with_its_last_kind(make_runner,
                                                                        executor) -> None:
    app = App()
    app.downstream("partner", retry={"max_retry": 1, "backoff": {"kind": "none"}})
    app.task("sync", max_retry=0, executor=executor)(_scripted(executor))
    runner = make_runner(app, workers=1)
    task = runner.submit("sync", {"fail": ["http_503", "http_401", "http_500"]})
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.error_kind == "http_401"
    assert "not retryable" in final.error_msg and "partner" in final.error_msg


def test_process_and_thread_tasks_spend_one_retry_budget(make_runner) -> None:
    """The budget is the worker's: what a process task's retries spent, a thread task's
    call can no longer spend (and the other way round)."""
    app = App()
    app.downstream("partner", retry={
        "max_retry": 5, "backoff": {"kind": "none"},
        "budget": {"kind": "tokens", "capacity": 10, "cost": 5, "refund": 5}})
    app.task("in_process", max_retry=0, executor="process")(tasks.scripted_call)
    app.task("on_thread", max_retry=0)(tasks.scripted_call)
    runner = make_runner(app, workers=1)
    first = runner.submit("in_process", {"fail": ["http_503"] * 4})
    assert runner.join(JOIN_S)
    assert runner.get(first.task_id).error_msg.endswith("retry budget exhausted")
    assert runner.clients["partner"].retries == 2  # 10 tokens, 5 a retry
    second = runner.submit("on_thread", {"fail": ["http_503"]})
    assert runner.join(JOIN_S)
    assert runner.get(second.task_id).error_msg.endswith("retry budget exhausted")
    third = runner.submit("on_thread", {"fail": []})  # answers at once: refunds 5
    assert runner.join(JOIN_S)
    fourth = runner.submit("in_process", {"fail": ["http_503"]})  # one retry affordable
    assert runner.join(JOIN_S)
    assert [runner.get(t.task_id).status for t in (third, fourth)] == [TaskStatus.SUCCESS] * 2
    assert runner.clients["partner"].retries == 3


@pytest.mark.parametrize("executor", ["thread", "process", "async"])
def test_an_adaptive_bulkhead_follows_the_calls_of_either_executor(make_runner,
                                                                  executor) -> None:
    """The runtime's call path feeds the adaptive limit: a failed call shrinks it (AIMD,
    x0.9 floored), as many good calls in a row as the limit grow it back by one."""
    app = App()
    app.downstream("partner", bulkhead=10, retry={"max_retry": 0},
                   adaptive={"kind": "aimd", "min": 1, "max": 10})
    app.task("sync", max_retry=0, executor=executor)(_scripted(executor))
    events = EventList()
    runner = make_runner(app, workers=1, sinks=[events])
    bulkhead = runner.scheduler.guards["partner"].bulkhead
    assert bulkhead.limit == 10
    failed = runner.submit("sync", {"fail": ["http_503"]})
    assert runner.join(JOIN_S)
    assert runner.get(failed.task_id).error_kind == "http_503"
    assert bulkhead.limit == 9
    runner.submit_many([runner.spec("sync", {"fail": []})] * 9)
    assert runner.join(JOIN_S)
    assert bulkhead.limit == 10 and bulkhead.in_use == 0
    limits = [(e.reason, e.subject, e.value) for e in events.of_kind(EventKind.LIMIT)]
    assert limits == [("adaptive", "partner", 9.0), ("adaptive", "partner", 10.0)]


# -- warm before the first claim -----------------------------------------------------------


def test_a_slow_import_is_paid_before_the_first_claim_not_inside_its_timeout(
        make_runner) -> None:
    """The kind's module takes 2 s to import and its timeout is 1 s: were the import left to
    the first job, every thread's first attempt would time out (max_retry 0: TIMEOUT)."""
    from tests.runtime import slow_import_app

    app = process_app(pid=(slow_import_app.pid, {"timeout": 1.0, "max_retry": 0}))
    runner = make_runner(app, workers=2)
    assert runner.procs.started == 2 and len(runner.procs.pids()) == 2  # before any task
    submitted = runner.submit_many([runner.spec("pid") for _ in range(6)])
    assert runner.join(JOIN_S)
    ended = [runner.get(t.task_id) for t in submitted]
    assert {(t.status, t.retry_count) for t in ended} == {(TaskStatus.SUCCESS, 0)}
    assert {t.result for t in ended} <= set(runner.procs.pids())
    assert runner.procs.started == 2  # no process was replaced


def test_a_function_no_task_process_can_import_stops_the_start_before_any_claim() -> None:
    from tests.runtime.unimportable_app import app

    store = MemoryStore()
    runner = Runner(app, store, workers=2)
    task = runner.submit("noop")
    with pytest.raises(RuntimeConfigError) as refused:
        runner.start()
    message = str(refused.value)
    assert "taskfuse_generated_tasks:noop" in message and "cannot import" in message
    assert "No module named" in message and "\n" not in message
    assert store.get(task.task_id).status is TaskStatus.PENDING  # nothing was claimed
    assert runner.procs.pids() == []  # and no task process is left behind


# -- what cannot cross ---------------------------------------------------------------------


def test_a_payload_json_cannot_carry_is_refused_before_it_reaches_a_process(make_runner) -> None:
    app = process_app(echo=(tasks.echo, {"max_retry": 3}))
    runner = make_runner(app, workers=1)
    task = runner.submit("echo", {1, 2})
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert final.status is TaskStatus.FAILED and final.retry_count == 0  # fatal: no retry
    assert final.error_kind == "payload_unserializable"
    assert "set" in final.error_msg and "json" in final.error_msg
    assert "\n" not in final.error_msg
    assert (runner.procs.started, runner.procs.killed) == (1, 0)  # the one warmed at start


def test_a_result_json_cannot_carry_is_refused(make_runner) -> None:
    app = process_app(sets=(tasks.returns_set, {"max_retry": 3}))
    runner = make_runner(app, workers=1)
    task = runner.submit("sets")
    assert runner.join(JOIN_S)
    final = runner.get(task.task_id)
    assert (final.status, final.error_kind, final.retry_count) == (
        TaskStatus.FAILED, "result_unserializable", 0)
    assert "set" in final.error_msg and "\n" not in final.error_msg


def test_pickle_carries_what_json_cannot_and_refuses_what_it_cannot(make_runner) -> None:
    app = process_app(echo=(tasks.echo, {"serializer": "pickle", "max_retry": 3}),
                      sets=(tasks.returns_set, {"serializer": "pickle"}))
    runner = make_runner(app, workers=1)
    echoed = runner.submit("echo", {1, 2})
    made = runner.submit("sets")
    refused = runner.submit("echo", {"fn": lambda: None})
    assert runner.join(JOIN_S)
    assert runner.get(echoed.task_id).result == {1, 2}
    assert runner.get(made.task_id).result == {1, 2, 3}
    final = runner.get(refused.task_id)
    assert (final.status, final.error_kind) == (TaskStatus.FAILED, "payload_unserializable")
    assert "pickle" in final.error_msg


# -- registration --------------------------------------------------------------------------


def _nested() -> Any:
    def inner(ctx: Any, payload: Any) -> None:
        return None

    return inner


@pytest.mark.parametrize(("fn", "why"), [
    (lambda ctx, payload: None, "is a lambda"),
    (_nested(), "is defined inside a function"),
    (functools.partial(tasks.echo), "partial object has no module and qualified name"),
])
def test_a_function_no_process_can_import_is_refused_at_registration(fn, why) -> None:
    app = App()
    with pytest.raises(RuntimeConfigError) as info:
        app.task("k", executor="process")(fn)
    message = str(info.value)
    assert why in message and "kind 'k'" in message and "\n" not in message
    assert "k" not in app.tasks


@pytest.mark.parametrize(("options", "says"), [
    ({"executor": "fork"}, "executor must be one of thread, process, async, got 'fork'"),
    ({"executor": "process", "serializer": "yaml"}, "serializer must be one of json, pickle"),
    ({"serializer": "pickle"}, "serializer is for executor='process'"),
])
def test_bad_executor_options_are_refused(options, says) -> None:
    with pytest.raises(RuntimeConfigError, match=says):
        App().task("k", **options)


def _wait(check: Any, what: str) -> None:
    """Wait for a condition another thread or process makes true (bounded, never a guess)."""
    import time

    end = time.monotonic() + JOIN_S
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)
