"""From the lab to production: `lab size --write-limits` then `taskfuse worker --limits`.

The sizing question of docs/lab/sizing.md (how many workers keep business p99 under 60 ms on the
incident?) is answered by `lab size` on a smaller batch and one seed, to keep this test
short; the file it writes is what a real worker process (SQLite store, metrics on a free
port) is started with, and the test reads the limits back from the running worker: its
start line and its /metrics page, then runs tasks whose calls get the file's timeout.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lab.cli import main as lab_main
from taskfuse.cli import main as taskfuse_main
from taskfuse.core.states import TaskStatus
from taskfuse.limits.files import load_limits
from taskfuse.store import open_store
from tests.observe.conftest import WAIT_S, scrape, wait_for

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.limits.deploy_app:app"
SIZE = ["size", "scenarios/incident.yaml", "--vary", "workers=5..50:5",
        "--slo", "business.p99_s<=0.06", "--minimize", "makespan_s",
        "--seeds", "1", "--jobs", "1", "--set", "batches.skus.count=300"]
_METRICS_AT = re.compile(r"metrics at http://[^:]+:(\d+)/metrics")


class Worker:
    """`taskfuse worker` in a subprocess; its JSON log lines read by a thread as they come."""

    def __init__(self, *argv: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("TASKFUSE_LIMITS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskfuse.cli", "worker", "--log-json", *argv],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def until(self, pattern: str) -> re.Match[str]:
        """The first log message matching `pattern` (waiting for it)."""
        while True:
            try:
                record = json.loads(self.lines.get(timeout=WAIT_S))
            except queue.Empty:
                raise AssertionError(f"no log line matched {pattern!r}: {self.log}") from None
            self.log.append(record)
            match = re.search(pattern, record["msg"])
            if match:
                return match

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=WAIT_S)


def test_size_then_deploy_the_same_file(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    limits_path = tmp_path / "L.yaml"
    assert lab_main([*SIZE, "--write-limits", str(limits_path)]) == 0
    out = capsys.readouterr()
    recommended = int(re.search(r"^workers\s+(\d+)", out.out, re.M).group(1))
    text = limits_path.read_text()
    assert text.startswith("# Limits recommended by lab size for scenario 'incident'")
    assert "business.p99_s<=0.06" in text and "Seeds: 7" in text and "Binds: " in text
    assert "Produced by: lab size scenarios/incident.yaml --vary workers=5..50:5" in text
    limits = load_limits(limits_path)
    assert limits.workers == recommended

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    worker = Worker("--store", url, "--app", APP, "--limits", str(limits_path),
                    "--metrics-port", "0", "--metrics-addr", "127.0.0.1")
    try:
        port = worker.until(_METRICS_AT.pattern).group(1)
        started = worker.until(r"started: (\d+) threads").group(1)
        line = worker.until(r"^limits from ").string
        page = scrape(f"http://127.0.0.1:{port}/metrics")
        _run_tasks(url, capsys)
    finally:
        code = worker.stop()
    assert code == 0
    # the start lines and the metrics say what the file says
    assert int(started) == recommended
    assert f"workers {recommended}" in line and "partner: timeout 1s, call retries 5" in line
    assert "pool shared 20" in line
    assert page.value("taskfuse_workers_limit") == recommended
    assert page.value("taskfuse_worker_threads") == recommended
    assert page.value("taskfuse_limit", downstream="partner", fuse="timeout_s") == 1.0
    assert page.value("taskfuse_limit", downstream="partner", fuse="call_max_retry") == 5
    assert page.value("taskfuse_pool_limit", pool="shared", fuse="size") == 20
    assert page.value("taskfuse_task_limit", fuse="timeout_s") == 120


def _run_tasks(url: str, capsys) -> None:
    """Tasks through the running worker: each call got the file's client timeout."""
    ids = []
    for sku in range(5):
        assert taskfuse_main(["submit", "--store", url, "--app", APP, "--json", "sync_sku",
                              "--payload", str(sku), "--batch", "skus"]) == 0
        ids.append(json.loads(capsys.readouterr().out)["task"]["task_id"])
    store = open_store(url)
    try:
        wait_for(lambda: store.counts().get(TaskStatus.SUCCESS, 0) == 5, "5 tasks done")
        results = [store.get(i).result for i in ids]
    finally:
        store.close()  # type: ignore[attr-defined]
    assert results == [{"sku": i, "timeout": 1.0} for i in range(5)]


def test_nothing_is_written_when_no_point_keeps_the_slo(tmp_path: Path, capsys,
                                                        monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    target = tmp_path / "L.yaml"
    args = [*SIZE[:3], "workers=40,50", *SIZE[4:], "--write-limits", str(target)]
    assert lab_main(args) == 1
    assert not target.exists()
    assert "no limits written" in capsys.readouterr().err


def test_a_missing_directory_is_refused_before_the_search(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    target = tmp_path / "nowhere" / "L.yaml"
    assert lab_main([*SIZE, "--write-limits", str(target)]) == 2
    err = capsys.readouterr()
    assert err.err.count("\n") == 1 and "does not exist" in err.err and err.out == ""


@pytest.mark.parametrize("text, words", [
    ("workers: unbounded\n", ":1: workers: 'unbounded' is the lab's open loop"),
    ("workers: 10\ndownstreams: {partner: {client: {bulkhead: 0}}}\n",
     ":2: downstreams.partner.client.bulkhead: input should be greater than or equal to 1"),
    ("wokers: 10\n", ":1: wokers: unknown key"),
])
def test_a_bad_limits_file_is_one_line_and_exit_2(tmp_path: Path, capsys, text: str,
                                                  words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code = taskfuse_main(["worker", "--store", f"sqlite:///{tmp_path / 't.db'}",
                          "--app", APP, "--limits", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "t.db").exists()  # refused before the store is opened


def test_unbounded_workers_run_when_the_command_gives_a_number(tmp_path: Path) -> None:
    path = tmp_path / "open-loop.yaml"
    path.write_text("workers: unbounded\nsweeper: {interval_s: 5, lease_s: 9}\n")
    worker = Worker("--store", f"sqlite:///{tmp_path / 't.db'}", "--app", APP,
                    "--limits", str(path), "--workers", "3", "--drain")
    try:
        assert worker.until(r"started: (\d+) threads").group(1) == "3"
        line = worker.until(r"^limits from ").string
    finally:
        worker.stop()
    assert "workers 3" in line and "lease 9s (heartbeat 3s)" in line


def test_sweep_takes_its_rules_from_the_file(tmp_path: Path, capsys) -> None:
    """A task whose lease lapsed 20 s ago: an orphan under the file's lease of 9 s, not
    under the default 30 s; a --lease flag wins over the file."""
    from taskfuse.core.task import TaskSpec
    from taskfuse.runtime import App

    path = tmp_path / "sweep.yaml"
    path.write_text("sweeper: {interval_s: 5, lease_s: 9, max_pending_age_s: 600}\n")
    url = f"sqlite:///{tmp_path / 't.db'}"
    store = open_store(url)
    try:
        sched = App().scheduler(store)
        task = sched.submit(TaskSpec("sync_sku", max_retry=1), time.time())
        sched.claim("dead-worker", time.time() - 20)
    finally:
        store.close()  # type: ignore[attr-defined]
    for argv, swept in ((["--limits", str(path), "--lease", "30"], 0), ([], 0),
                        (["--limits", str(path)], 1)):
        assert taskfuse_main(["sweep", "--store", url, "--once", *argv]) == 0
        assert capsys.readouterr().out.strip() == f"swept {swept} task(s)", argv
    store = open_store(url)
    try:
        assert store.get(task.task_id).error_kind == "orphaned"
    finally:
        store.close()  # type: ignore[attr-defined]


def test_submit_applies_the_files_batch_cap_and_kind_defaults(tmp_path: Path, capsys) -> None:
    path = tmp_path / "L.yaml"
    path.write_text("kinds: {sync_sku: {timeout_s: 33, max_retry: 1}}\n"
                    "batches: [{id: skus, cap: 4, priority: 2}]\n")
    url = f"sqlite:///{tmp_path / 't.db'}"
    assert taskfuse_main(["submit", "--store", url, "--app", APP, "--limits", str(path),
                          "--json", "sync_sku", "--batch", "skus"]) == 0
    task = json.loads(capsys.readouterr().out)["task"]
    assert (task["timeout"], task["max_retry"], task["priority"]) == (33, 1, 2)
    store = open_store(url)
    try:
        assert store.get_batch("skus").cap == 4
    finally:
        store.close()  # type: ignore[attr-defined]
