"""A worker whose SQLite file cannot grow (here a file size limit, as a quota or a full disk
would do) says so in one line, keeps every task as it was, and `--drain` ends."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from taskfuse.core.states import TaskStatus
from taskfuse.store import open_store
from tests.runtime.sample_app import app
from tests.runtime.test_procexec_cli import ROOT, marked_env

#: Bytes any file of the worker may reach: less than the store holds already, so its first
#: write past the limit (claims fit in the log, outcomes with their results do not) fails.
FILE_LIMIT = 40_000


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def test_a_drain_on_a_store_that_cannot_grow_ends_with_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = open_store(url)
    sched, now = app.scheduler(store), time.time()
    for _ in range(200):
        sched.submit(app.spec("echo", "x" * 1000), now)
    store.close()
    worker = subprocess.run(
        [sys.executable, "-m", "taskfuse.cli", "worker", "--store", url, "--app",
         "tests.runtime.sample_app:app", "--workers", "2", "--drain"],
        cwd=ROOT, env=marked_env("sqlite-full"), preexec_fn=_limit_files,
        capture_output=True, text=True, timeout=60)
    errors = [line for line in worker.stderr.splitlines() if " ERROR " in line]
    assert worker.returncode == 1, worker.stderr
    assert "Traceback" not in worker.stderr
    assert len(errors) == 1 and "tasks.db' cannot grow" in errors[0], worker.stderr
    store = open_store(url)
    counts = store.counts()
    store.close()
    assert sum(counts.values()) == 200 and counts[TaskStatus.SUCCESS] == 0
