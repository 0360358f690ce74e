"""A task process is a process group of its own: what a task forks dies with the task (killed
at its timeout) and with its worker (killed with SIGKILL); a BaseException a process task
raises is its failure, logged through the worker's log format, and the process goes on."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

from taskfuse.core.states import TaskStatus
from taskfuse.store import open_store
from tests.runtime import procgroup_app as tasks
from tests.runtime.conftest import JOIN_S
from tests.runtime.test_procexec import Listener, _wait, alive, listener, process_app
from tests.runtime.test_procexec_cli import ROOT, marked_env, worker_command

APP = "tests.runtime.procgroup_app:app"
__all__ = ["listener"]  # the fixture, shared with the process executor's tests


def _command(url: str, *extra: str) -> list[str]:
    command = worker_command(url, *extra)
    command[command.index("tests.runtime.procexec_app:app")] = APP
    return command


def test_a_child_the_task_forked_dies_when_its_task_times_out(make_runner, listener) -> None:
    app = process_app(fork_and_hang=(tasks.fork_and_hang, {"timeout": 1, "max_retry": 0}))
    runner = make_runner(app, workers=1)
    task = runner.submit("fork_and_hang", {"port": listener.port})
    task_pid, child_pid = map(int, listener.accept()[1].split())
    assert alive(child_pid)
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.TIMEOUT
    assert not alive(task_pid)
    _wait(lambda: not alive(child_pid), "the task's child to die with its task")


def test_a_child_the_task_forked_dies_with_a_worker_killed_with_sigkill(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = open_store(url)
    listener = Listener()
    tasks.app.scheduler(store).submit(tasks.app.spec("fork_and_hang", {"port": listener.port}),
                                      time.time())
    worker = subprocess.Popen(_command(url), cwd=ROOT, env=marked_env(uuid.uuid4().hex),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        task_pid, child_pid = map(int, listener.accept()[1].split())
        assert alive(child_pid)
        worker.kill()
        worker.wait(JOIN_S)
        _wait(lambda: not alive(task_pid), "the task process to follow its worker")
        _wait(lambda: not alive(child_pid), "the task's child to follow its worker")
    finally:
        if worker.poll() is None:
            worker.kill()
        listener.close()
        store.close()


def test_base_exceptions_in_process_tasks_fail_them_in_the_log_format(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = open_store(url)
    sched, now = tasks.app.scheduler(store), time.time()
    raised = {name: sched.submit(tasks.app.spec("raise_exit", name), now)
              for name in sorted(tasks._EXITS)}
    after = [sched.submit(tasks.app.spec("pid"), now) for _ in range(2)]
    done = subprocess.run(_command(url, "--drain", "--workers", "1"), cwd=ROOT,
                          env=marked_env(uuid.uuid4().hex), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]  # JSON, every line
    for name, task in raised.items():
        failed = store.get(task.task_id)
        assert (failed.status, failed.error_kind, failed.retry_count) == (
            TaskStatus.FAILED, name, 0)
        said = [r for r in records if r.get("task_id") == task.task_id
                and "would have ended the thread" in r["msg"]]
        assert len(said) == 1 and said[0]["level"] == "ERROR" and name in said[0]["error"]
    pids = {store.get(t.task_id).result for t in after}
    assert all(store.get(t.task_id).status is TaskStatus.SUCCESS for t in after)
    assert len(pids) == 1  # the process that raised went on serving: none was replaced
    store.close()
