"""What a task prints reaches a worker's log as that task's records, in the log's format.

`taskfuse worker --log-json` runs tasks that print (on a thread and in a task process) and
drains; its stdout stays empty and each printed line is one JSON record stamped with the
task that printed it, as Celery's workers redirect their tasks' stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from taskfuse.core.task import Task
from taskfuse.store import open_store

ROOT = Path(__file__).resolve().parents[2]


def _submit(url: str, kinds: dict[str, str]) -> None:
    store = open_store(url)
    try:
        store.insert([Task(task_id, kind, trace_id=f"tr-{task_id}", created_at=time.time())
                      for task_id, kind in kinds.items()])
    finally:
        store.close()  # type: ignore[attr-defined]


def test_what_tasks_print_becomes_their_log_records(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    kinds = {"t1": "say", "t2": "say", "p1": "say_in_process"}
    _submit(url, kinds)
    proc = subprocess.run(
        [sys.executable, "-m", "taskfuse.cli", "worker", "--app",
         "tests.runtime.prints_app:app", "--store", url, "--workers", "2", "--drain",
         "--log-json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    records = [json.loads(line) for line in proc.stderr.splitlines()]  # each line JSON
    printed = {(r.get("task_id"), r["msg"]) for r in records if r["logger"].startswith(
        "taskfuse.task.")}
    for task_id in kinds:
        for text in (f"hello from {task_id}", f"second line of {task_id}",
                     f"unfinished line of {task_id}"):
            assert (task_id, text) in printed, (task_id, text)
    said = [r for r in records if r["msg"] == "hello from p1"]
    assert said[0]["logger"] == "taskfuse.task.say_in_process"
    assert said[0]["trace_id"] == "tr-p1"
    store = open_store(url)
    try:
        assert {store.get(t).result for t in kinds} == {"said"}  # type: ignore[union-attr]
    finally:
        store.close()  # type: ignore[attr-defined]
