"""`taskfuse worker` with process tasks, as real processes: hung tasks end TIMEOUT, the
worker exits, and no task process outlives it, not even when the worker is SIGKILLed.

Every process the worker starts inherits a marker in its environment, so the test finds
them all in /proc (the fork server, the task processes forked from it) without knowing
their pids in advance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from taskfuse.core.states import TaskStatus
from taskfuse.store import open_store
from tests.runtime.conftest import JOIN_S
from tests.runtime.procexec_app import app
from tests.runtime.test_procexec import Listener, _wait, alive

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.runtime.procexec_app:app"


def worker_command(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "taskfuse.cli", "worker", "--store", url, "--app", APP,
            "--workers", "2", "--log-json", *extra]


def marked_env(mark: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TASKFUSE_TEST_MARK": mark}


def marked(mark: str) -> dict[int, int]:
    """pid -> parent pid of every live process whose environment carries `mark`."""
    needle = f"TASKFUSE_TEST_MARK={mark}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ and state != "Z":
            found[int(entry)] = int(ppid)
    return found


def test_drain_ends_hung_process_tasks_as_timeout_and_leaves_no_task_process(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = open_store(url)
    sched, now = app.scheduler(store), time.time()
    hung = [sched.submit(app.spec("hang"), now) for _ in range(4)]
    ordinary = [sched.submit(app.spec(kind, i), now)
                for i, kind in enumerate(["double", "double_thread"] * 3)]
    mark = uuid.uuid4().hex
    err_path = tmp_path / "worker.log"
    with err_path.open("w") as err:  # a file, not a pipe: reading one would wait for
        worker = subprocess.Popen(worker_command(url, "--drain"), cwd=ROOT,  # every holder
                                  env=marked_env(mark), stdout=subprocess.DEVNULL, stderr=err)
        code = worker.wait(120)
    at_exit = marked(mark)
    stderr = err_path.read_text()
    assert code == 0, stderr

    assert store.counts() == {**dict.fromkeys(TaskStatus, 0), TaskStatus.TIMEOUT: 4,
                              TaskStatus.SUCCESS: 6}
    for task in ordinary:
        assert store.get(task.task_id).result["twice"] == int(task.payload) * 2
    log = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    hanging = {r["trace_id"]: int(r["msg"].split()[-1]) for r in log
               if r["msg"].startswith("hanging in pid")}
    assert any("kinds double [process], double_thread, hang [process]" in r["msg"] for r in log)
    assert set(hanging) == {t.trace_id for t in hung}  # forwarded logs carry the trace_id
    assert len(set(hanging.values())) == 4  # each hung task had its own process, killed
    assert [pid for pid in hanging.values() if alive(pid)] == []
    # Task processes are the fork server's children; none is left when the worker exits.
    assert {pid for pid, ppid in at_exit.items() if ppid in at_exit} == set()
    _wait(lambda: not marked(mark), "the fork server to follow its worker out")
    store.close()


def test_a_task_process_does_not_outlive_a_worker_killed_with_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = open_store(url)
    listener = Listener()
    app.scheduler(store).submit(app.spec("hang_long", {"port": listener.port}), time.time())
    mark = uuid.uuid4().hex
    worker = subprocess.Popen(worker_command(url), cwd=ROOT, env=marked_env(mark),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pid = int(listener.accept()[1])
        assert alive(pid) and pid in marked(mark)
        worker.kill()
        worker.wait(JOIN_S)
        _wait(lambda: not alive(pid), "the orphaned task process to exit")
        _wait(lambda: not marked(mark), "every process of the worker to exit")
    finally:
        if worker.poll() is None:
            worker.kill()
        listener.close()
        store.close()


def test_a_worker_whose_task_function_no_process_can_import_exits_with_one_line(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    command = [*worker_command(url, "--drain")]
    command[command.index(APP)] = "tests.runtime.unimportable_app:app"
    done = subprocess.run(command, env=marked_env(uuid.uuid4().hex), capture_output=True,
                          text=True, timeout=JOIN_S)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "taskfuse_generated_tasks:noop: a task process cannot import it" in lines[0]
