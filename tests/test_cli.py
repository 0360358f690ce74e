"""The `taskfuse` command, called as main([...]) on a SQLite store; signals via a subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskfuse.cli import main
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App
from taskfuse.store import open_store

APP = "tests.runtime.sample_app:app"
ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 20.0


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def submit(capsys, db: str, *argv: str) -> dict:
    code, out, err = run(capsys, "submit", "--store", db, "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def stored(db: str, task_id: str):
    store = open_store(db)
    try:
        return store.get(task_id)
    finally:
        store.close()


# -- the happy path ------------------------------------------------------------------------


def test_submit_work_status_inspect(capsys, db, tmp_path) -> None:
    code, out, _ = run(capsys, "submit", "--store", db, "echo", "--payload", '{"sku": "A1"}',
                       "--app", APP)
    assert code == 0 and out.startswith("submitted ")
    task_id = out.split()[1]
    code, out, _ = run(capsys, "status", "--store", db, "--json")
    assert code == 0 and json.loads(out)["counts"]["PENDING"] == 1

    trace = tmp_path / "worker.trace"
    code, _, err = run(capsys, "worker", "--store", db, "--app", APP, "--workers", "2",
                       "--drain", "--trace", str(trace), "--trace-interval", "0.05")
    assert code == 0 and "stopped" in err
    task = stored(db, task_id)
    assert task.status is TaskStatus.SUCCESS and task.result == {"sku": "A1"}

    code, out, _ = run(capsys, "inspect", "--store", db, task_id, "--trace", str(trace))
    assert code == 0
    assert re.search(rf"^task_id +{task_id}$", out, re.M) and "ended SUCCESS" in out
    assert "PENDING -> RUNNING" in out and "RUNNING -> SUCCESS" in out
    code, out, _ = run(capsys, "inspect", "--store", db, task.trace_id, "--json")
    assert code == 0 and json.loads(out)["tasks"][0]["status"] == "SUCCESS"


def test_status_lists_each_running_worker_with_what_it_did(capsys, db) -> None:
    """What a worker says of itself in its beat, one line each; a stopped one is left out;
    a long worker id is printed whole, whatever the width of the output."""
    from taskfuse.core.storeapi import WorkerBeat

    long_id = "worker-7.batch-fleet.prod.eu-west-1.internal.example.com:48213"
    store = open_store(db)
    try:
        store.beat_worker(WorkerBeat(long_id, "app", 8, 3, 1, {"sync": 1}, 120, 117, 2,
                                     time.time() - 60, time.time() - 2, failed=9))
        store.beat_worker(WorkerBeat("gone:1", "app", 4, 0, 0, {}, 5, 5, 0, 0.0, 1.0,
                                     stopped=True))
    finally:
        store.close()
    code, out, _ = run(capsys, "status", "--store", db)
    assert code == 0
    head, line = out.splitlines()[-2:]
    assert head.split() == ["WORKER", "THREADS", "BUSY", "STUCK", "DONE", "ERRORS", "BEAT"]
    assert line.split() == [long_id, "8", "3", "1", "(sync", "1)", "117", "9", "2s", "ago"]
    assert "gone:1" not in out


def test_status_table_shows_batches_with_caps(capsys, db) -> None:
    for i in range(3):
        submit(capsys, db, "echo", "--batch", "skus", "--cap", "2", "--payload", str(i))
    submit(capsys, db, "echo", "--batch", "other")
    code, out, _ = run(capsys, "status", "--store", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["BATCH", "STATUS", "CAP", "TOTAL"]
    assert lines[1].split()[:5] == ["other", "RUNNING", "-", "1", "1"]
    assert lines[2].split()[:5] == ["skus", "RUNNING", "2", "3", "3"]
    assert lines[3].split()[:4] == ["(all", "tasks)", "4", "4"]
    code, out, _ = run(capsys, "status", "--store", db, "skus", "--json")
    data = json.loads(out)
    assert code == 0 and data["cap"] == 2 and data["counts"]["PENDING"] == 3


def test_idempotency_key_returns_the_first_task(capsys, db) -> None:
    first = submit(capsys, db, "echo", "--key", "sku-1:chan-2")
    again = submit(capsys, db, "echo", "--key", "sku-1:chan-2", "--payload", "1")
    assert first["created"] and not again["created"]
    assert again["task"]["task_id"] == first["task"]["task_id"]
    code, out, _ = run(capsys, "submit", "--store", db, "echo", "--key", "sku-1:chan-2")
    assert code == 0 and out.startswith(f"exists {first['task']['task_id']}")


def test_registered_defaults_apply_with_app(capsys, db) -> None:
    task = submit(capsys, db, "reject", "--app", APP)["task"]
    assert task["max_retry"] == 0 and task["timeout"] == 60.0  # app default timeout
    task = submit(capsys, db, "echo", "--app", APP, "--timeout", "3", "--priority", "5")["task"]
    assert task["timeout"] == 3.0 and task["priority"] == 5


def test_cancel_task_then_again_then_batch(capsys, db) -> None:
    task_id = submit(capsys, db, "echo")["task"]["task_id"]
    code, out, _ = run(capsys, "cancel", "--store", db, task_id)
    assert code == 0 and f"canceled {task_id} (was PENDING)" in out
    assert stored(db, task_id).status is TaskStatus.CANCELED
    code, out, _ = run(capsys, "cancel", "--store", db, task_id)
    assert code == 1 and "already ended CANCELED" in out
    for _ in range(3):
        submit(capsys, db, "echo", "--batch", "b1")
    code, out, _ = run(capsys, "cancel", "--store", db, "b1")
    assert code == 0 and "canceled 3 unfinished task(s) of batch b1" in out
    code, out, _ = run(capsys, "status", "--store", db, "b1", "--json")
    assert json.loads(out)["status"] == "CANCELED"


def test_dag_dependency_and_failure_propagation(capsys, db) -> None:
    up = submit(capsys, db, "reject", "--app", APP, "--id", "up")["task"]["task_id"]
    submit(capsys, db, "echo", "--app", APP, "--id", "down", "--depends-on", up)
    code, _, _ = run(capsys, "worker", "--store", db, "--app", APP, "--drain")
    assert code == 0
    assert stored(db, "up").status is TaskStatus.FAILED
    down = stored(db, "down")
    assert down.status is TaskStatus.CANCELED and down.error_kind == "upstream_failed"


def test_sweep_once_reclaims_a_dead_workers_task(capsys, db) -> None:
    task_id = submit(capsys, db, "echo", "--max-retry", "1")["task"]["task_id"]
    store = open_store(db)
    try:
        App().scheduler(store).claim("dead-worker", time.time() - 60)
    finally:
        store.close()
    code, out, _ = run(capsys, "sweep", "--store", db, "--once", "--lease", "30")
    assert code == 0 and "swept 1 task(s)" in out
    task = stored(db, task_id)
    assert task.status is TaskStatus.PENDING and task.error_kind == "orphaned"


# -- mistakes: one clear line, exit 2 ------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "--store", "redis://localhost/0"], "unknown store URL scheme 'redis'"),
        (["submit", "--store", "{db}", "echo", "--payload", "{oops"], "not valid JSON"),
        (["submit", "--store", "{db}", "nope", "--app", APP], "no task function registered"),
        (["submit", "--store", "{db}", "echo", "--cap", "3"], "--cap needs --batch"),
        (["inspect", "--store", "{db}", "missing"], "no task with id or trace_id 'missing'"),
        (["cancel", "--store", "{db}", "missing"], "no task or batch with id 'missing'"),
        (["status", "--store", "{db}", "missing"], "unknown batch 'missing'"),
        (["worker", "--store", "{db}", "--app", "tests.nowhere:app"], "cannot import app"),
        (["worker", "--store", "{db}", "--app", "tests.runtime.sample_app:not_an_app"],
         "is not a taskfuse App"),
        (["worker", "--store", "{db}", "--app", "no_colon"], "must look like module:object"),
        (["inspect", "--store", "{db}", "x", "--trace", "/nonexistent/run.trace"],
         "no task with id"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(capsys, db, argv, message) -> None:
    code, _, err = run(capsys, *[a.replace("{db}", db) for a in argv])
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_store_and_unreachable_database(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TASKFUSE_STORE", raising=False)
    code, _, err = run(capsys, "status")
    assert code == 2 and "no store given" in err
    url = "postgresql://ops:hunter2@127.0.0.1:1/test?retry_for=0&connect_timeout=1"
    code, _, err = run(capsys, "status", "--store", url)
    assert code == 2 and "hunter2" not in err and len(err.strip().splitlines()) == 1


def test_verbose_adds_the_traceback(capsys) -> None:
    code, _, err = run(capsys, "status", "--store", "redis://x", "-v")
    assert code == 2 and "Traceback" in err and "unknown store URL scheme" in err


def test_argument_errors_and_help(capsys) -> None:
    code, _, err = run(capsys, "submit")
    assert code == 2 and err.count("\n") == 1 and "see taskfuse submit --help" in err
    code, _, err = run(capsys, "worker", "--workers", "0")
    assert code == 2 and "expected a whole number from 1 to 10000, got '0'" in err
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "inspect" in out
    assert run(capsys)[0] == 2


# -- signals: the worker as an operator runs it --------------------------------------------


def _start_worker(db: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "taskfuse.cli", "worker", "--store", db, "--app", APP, *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_running(db: str, n: int, proc: subprocess.Popen) -> None:
    store = open_store(db)
    try:
        end = time.monotonic() + WAIT_S
        while store.counts()[TaskStatus.RUNNING] < n:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "the worker never started its tasks"
            time.sleep(0.05)
    finally:
        store.close()


def test_sigterm_releases_unfinished_tasks_to_pending(capsys, db) -> None:
    ids = [submit(capsys, db, "nap", "--payload", "30")["task"]["task_id"] for _ in range(3)]
    proc = _start_worker(db, "--workers", "2", "--grace", "0.3")
    try:
        _wait_running(db, 2, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "2 released to PENDING" in err
    for task_id in ids:
        task = stored(db, task_id)
        assert task.status is TaskStatus.PENDING and task.retry_count == 0
        assert task.worker_id is None


def test_second_signal_exits_at_once(capsys, db) -> None:
    began = Path(db.removeprefix("sqlite:///")).with_name("began")
    payload = json.dumps({"s": 30, "began": str(began)})
    task_id = submit(capsys, db, "stubborn", "--payload", payload)["task"]["task_id"]
    proc = _start_worker(db, "--workers", "1", "--grace", "60")
    try:
        end = time.monotonic() + WAIT_S  # its code runs: a claim still in the buffer would
        while not began.exists():  # be released at once, the worker gone before the 2nd
            assert proc.poll() is None and time.monotonic() < end, "the task never began"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "exiting now" in err
    assert stored(db, task_id).status is TaskStatus.RUNNING  # the sweeper's job now


def test_worker_logs_json_lines_with_trace_ids(capsys, db) -> None:
    task = submit(capsys, db, "reject", "--payload", "7")["task"]
    code, _, err = run(capsys, "worker", "--store", db, "--app", APP, "--drain", "--log-json")
    assert code == 0
    lines = [json.loads(line) for line in err.strip().splitlines()]
    [failure] = [line for line in lines if line.get("task_id") == task["task_id"]]
    assert failure["trace_id"] == task["trace_id"] and failure["kind"] == "reject"
    assert "cannot use 7" in failure["msg"]


def test_sweeper_process_stops_on_sigterm(db) -> None:
    open_store(db).close()  # create the file first: the sweeper only reads and moves
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskfuse.cli", "sweep", "--store", db, "--every", "0.05"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first_line = proc.stderr.readline()  # logged once its signal handlers are in place
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "sweeper started" in first_line and "swept 0 task(s)" in out


@pytest.mark.parametrize("prog", ["taskfuse", "lab"])
def test_version_names_the_installed_package(prog: str) -> None:
    """`--version` answers (it was an error, and `lab -v` printed usage), as a bug report needs."""
    from importlib.metadata import version

    exe = Path(sys.executable).parent / prog
    done = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f"{prog} {version('taskfuse')} (Python ")
