"""Two `taskfuse worker --metrics-port` processes on one durable store, scraped over HTTP.

What an operator gets from a fleet: both workers report the store's counts (the same
numbers), their per-process counters add up to the store's, their JSON log lines carry the
trace_id of the task they are about, and `taskfuse inspect` finds the task from the trace id
a partner logged.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from taskfuse.cli import main
from taskfuse.core.states import TaskStatus
from taskfuse.observe import traceparent as w3c
from taskfuse.store import open_store
from tests.observe.conftest import WAIT_S, Scrape, scrape, wait_for
from tests.store.backends import drop_schema, need_pg, new_schema, pg_url

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.runtime.sample_app:app"
CALLER_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_METRICS_AT = re.compile(r"metrics at http://[^:]+:(\d+)/metrics")


class Worker:
    """A worker subprocess whose stderr (JSON log lines) is read by a thread as it comes."""

    def __init__(self, store_url: str, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskfuse.cli", "worker", "--store", store_url, "--app", APP,
             "--workers", "2", "--id", name, "--log-json", "--metrics-port", "0",
             "--metrics-addr", "127.0.0.1"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self._metrics_url()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def _metrics_url(self) -> str:
        """The endpoint's address, from the worker's own log line (it asked for port 0)."""
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"worker never logged its metrics port: {self.log}") from None
            record = json.loads(line)
            self.log.append(record)
            match = _METRICS_AT.search(record["msg"])
            if match:
                return f"http://127.0.0.1:{match.group(1)}/metrics"

    def stop(self) -> int:
        """SIGTERM, wait for a graceful exit, collect the rest of the log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=WAIT_S)
        self._reader.join(timeout=WAIT_S)  # stderr reached its end
        while not self.lines.empty():
            self.log.append(json.loads(self.lines.get_nowait()))
        return code


@contextmanager
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'fleet.db'}"


@contextmanager
def postgres_url(tmp_path: Path) -> Iterator[str]:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    url = pg_url(schema)
    PostgresStore(url).close()  # create the schema before two workers race to migrate it
    try:
        yield url
    finally:
        drop_schema(schema)


def _submit(capsys, url: str, *argv: str) -> dict:
    code = main(["submit", "--store", url, "--json", "--app", APP, *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["task"]


def _counts(url: str) -> dict[str, int]:
    store = open_store(url)
    try:
        return {s.value: n for s, n in store.counts().items()}
    finally:
        store.close()  # type: ignore[attr-defined]


def _finished_here(page: Scrape, status: str) -> float:
    return page.value("taskfuse_tasks_finished_total", status=status)


@pytest.mark.parametrize("store", [sqlite_url, postgres_url], ids=["sqlite", "postgres"])
def test_a_fleet_reports_the_stores_numbers(store, tmp_path, capsys) -> None:
    with store(tmp_path) as url:
        workers = [Worker(url, "w1"), Worker(url, "w2")]
        try:
            _check_fleet(workers, url, capsys)
        finally:
            codes = [w.stop() for w in workers]
        assert codes == [0, 0]
        _check_logs(workers)


def _check_fleet(workers: list[Worker], url: str, capsys) -> None:
    for i in range(12):
        _submit(capsys, url, "echo", "--payload", str(i), "--batch", "skus")
    bad = _submit(capsys, url, "reject", "--payload", '"X9"', "--trace-id", CALLER_TRACEPARENT)
    assert bad["trace_id"] == w3c.parse(CALLER_TRACEPARENT).trace_id  # the caller's trace
    wait_for(lambda: _counts(url)["SUCCESS"] + _counts(url)["FAILED"] == 13, "13 tasks done")

    counts = _counts(url)
    pages = [scrape(w.url) for w in workers]
    for page in pages:  # every worker reports the store's numbers, not its own share
        for status, n in counts.items():
            assert page.value("taskfuse_tasks", status=status) == n, status
        assert page.value("taskfuse_queue_depth") == counts["PENDING"] == 0
        assert page.value("taskfuse_tasks_running") == counts["RUNNING"] == 0
        assert page.value("taskfuse_success_ratio") == pytest.approx(12 / 13)
    # per-process counters add up to the store's totals
    assert sum(_finished_here(p, "SUCCESS") for p in pages) == counts["SUCCESS"] == 12
    assert sum(_finished_here(p, "FAILED") for p in pages) == counts["FAILED"] == 1
    assert sum(p.get("taskfuse_task_duration_seconds_count", 0.0, batch="skus")
               for p in pages) == 12  # a worker that ran none of them has no such series
    assert sum(p.value("taskfuse_worker_threads") for p in pages) == 4

    # the trace id a partner logged (W3C form, or its whole traceparent) finds the task
    task_id = _submit(capsys, url, "echo", "--payload", "1")["task_id"]
    wait_for(lambda: _counts(url)["SUCCESS"] == 13, "the last task done")
    stored = open_store(url)
    try:
        task = stored.get(task_id)
    finally:
        stored.close()  # type: ignore[attr-defined]
    for seen_by_partner in (w3c.w3c_trace_id(task.trace_id), w3c.traceparent(task.trace_id)):
        assert main(["inspect", "--store", url, seen_by_partner]) == 0
        out = capsys.readouterr().out
        assert re.search(rf"^task_id +{task_id}$", out, re.M) and "ended SUCCESS" in out
    assert main(["inspect", "--store", url, w3c.w3c_trace_id("feedfacefeedface")]) == 2
    capsys.readouterr()
    assert task.status is TaskStatus.SUCCESS


def _check_logs(workers: list[Worker]) -> None:
    """Every JSON line about a task carries its trace_id; the failure is logged with it."""
    records = [r for w in workers for r in w.log]
    about_tasks = [r for r in records if "task_id" in r]
    assert about_tasks and all(r.get("trace_id") for r in about_tasks)
    caller = w3c.parse(CALLER_TRACEPARENT).trace_id
    failed = [r for r in about_tasks if r["trace_id"] == caller]
    assert failed and "attempt failed" in failed[0]["msg"] and failed[0]["kind"] == "reject"


def test_a_bad_metrics_port_or_trace_id_is_a_usage_error(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    code = main(["submit", "--store", url, "echo", "--trace-id", "ff-" + "1" * 32 + "-" +
                 "2" * 16 + "-01"])
    assert code == 2 and "--trace-id" in capsys.readouterr().err
    code = main(["worker", "--store", url, "--app", APP, "--metrics-port", "-1"])
    assert code == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code = main(["worker", "--store", url, "--app", APP, "--drain", "--metrics-addr",
                     "127.0.0.1", "--metrics-port", port])
    assert code == 2 and "in use" in capsys.readouterr().err
