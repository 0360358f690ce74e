"""Every line a worker or sweeper process prints is in its log format, through a restart of
its database, with no credential in any of them.

A private PostgreSQL cluster (tests/runtime/pgcluster.py) is stopped mid-run for longer than
the store's retry_for and started again while a `taskfuse worker` and a `taskfuse sweep`
process run against it. Their stderr then holds our own records and the libraries' (psycopg's
pool reconnecting, which used to reach Python's last-resort handler as multi-line text
without a time), a `warnings.warn`, an exception that ended a thread and a log call that
cannot be formatted (tests/runtime/logs_app.py). With --log-json each line must be one JSON
object with a time and a level; in text each record starts with its time and level and only
a traceback continues it, indented. The store URL carries two secrets (trust authentication
ignores them); neither may appear anywhere.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.runtime.logs_app import LEAKY_URL, app
from tests.runtime.pgcluster import private_cluster
from tests.store.backends import IN_CI

ROOT = Path(__file__).resolve().parents[2]
RETRY_FOR_S = 1.0
WORK = 150
ODD = ("warn", "crash_thread", "bad_log")
WAIT_S = 60.0
LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
TEXT_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) "
                         r"(?P<logger>\S+)(?: \[[^\]]*\])? ")


class Lines:
    """A process's stderr, read line by line in a thread; `wait` for a line to show up."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait(self, found: Callable[[str], bool], what: str) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: any(map(found, self.lines)), WAIT_S), (
                f"no line {what} in:\n" + "\n".join(self.lines))

    def finish(self) -> list[str]:
        self._thread.join(WAIT_S)
        return self.lines


def _command(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "taskfuse.cli", *argv], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _succeeded(conninfo: str) -> int:
    """Tasks SUCCESS, asked on a connection of its own (the processes' may be broken)."""
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM tf.tasks WHERE status = 'SUCCESS'"
                            ).fetchone()[0]


def _wait_succeeded(conninfo: str, n: int) -> None:
    end = time.monotonic() + WAIT_S
    while _succeeded(conninfo) < n:
        assert time.monotonic() < end, f"fewer than {n} tasks succeeded"
        time.sleep(0.05)


def _records(lines: list[str], json_lines: bool) -> list[dict[str, str]]:
    """Each line as a record {level, logger, msg...}; fails on a line out of format."""
    records: list[dict[str, str]] = []
    for line in lines:
        if json_lines:
            record = json.loads(line)
            assert isinstance(record, dict), line
            assert isinstance(record["ts"], float) and record["ts"] > 1e9, line
            assert record["level"] in LEVELS and record["logger"], line
            records.append(record)
            continue
        match = TEXT_RECORD.match(line)
        if match:
            assert match["level"] in LEVELS, line
            records.append({"level": match["level"], "logger": match["logger"], "msg": line})
        else:  # only a traceback continues a record, indented under it
            assert records and line.startswith("    "), f"a line out of format: {line!r}"
            records[-1]["msg"] += "\n" + line
    return records


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["json", "text"])
def test_worker_and_sweeper_lines_keep_their_format_through_a_restart(mode: str) -> None:
    try:
        cluster_cm = private_cluster()
        pg = cluster_cm.__enter__()
    except (RuntimeError, OSError) as exc:  # no server binaries on this machine
        if IN_CI:
            raise
        pytest.skip(f"cannot start a private PostgreSQL cluster: {exc}")
    password, ssl_password = (f"pw-{secrets.token_hex(8)}" for _ in range(2))
    plain = f"{pg.url}?connect_timeout=5"
    url = (pg.url.replace("postgres@", f"postgres:{password}@")
           + f"?schema=tf&retry_for={RETRY_FOR_S}&sslpassword={ssl_password}")
    log_flag = ["--log-json"] if mode == "json" else []
    procs: list[subprocess.Popen[str]] = []
    try:
        from taskfuse.store.postgres import PostgresStore

        with PostgresStore(url) as store:
            specs = [app.spec(kind) for kind in ODD] + [app.spec("work", i) for i in range(WORK)]
            app.scheduler(store).submit_many(specs, time.time())
        worker = _command("worker", "--store", url, "--app", "tests.runtime.logs_app:app",
                          "--workers", "2", *log_flag)
        sweeper = _command("sweep", "--store", url, "--every", "0.2", *log_flag)
        procs += [worker, sweeper]
        out, err = Lines(worker), Lines(sweeper)
        err.wait(lambda line: "sweeper started" in line, "saying the sweeper started")
        _wait_succeeded(plain, len(ODD) + 20)  # under way, the odd tasks done
        pg.stop()
        down_at = time.monotonic()
        out.wait(lambda line: "psycopg.pool" in line, "from psycopg's pool")
        err.wait(lambda line: "sweep pass failed" in line, "saying a sweep pass failed")
        time.sleep(max(0.0, down_at + 3 * RETRY_FOR_S - time.monotonic()))  # the outage
        pg.start()
        _wait_succeeded(plain, len(ODD) + WORK)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(WAIT_S) for proc in procs]
        swept = sweeper.stdout.read() if sweeper.stdout is not None else ""
        worker_lines, sweeper_lines = out.finish(), err.finish()
    finally:
        for proc in procs:
            proc.kill()
        cluster_cm.__exit__(None, None, None)

    assert codes == [0, 0], (worker_lines, sweeper_lines)
    assert "swept" in swept
    every = worker_lines + sweeper_lines
    for secret in (password, ssl_password, "Th1sMustNotLeak"):
        assert not any(secret in line for line in every), secret
    assert LEAKY_URL.replace("Th1sMustNotLeak", "***") in "\n".join(every)
    worker_records = _records(worker_lines, mode == "json")
    failed = [r for r in _records(sweeper_lines, mode == "json")
              if "sweep pass failed" in r["msg"]]
    assert failed and all(r["level"] == "WARNING" for r in failed), failed
    assert not any("Traceback" in r["msg"] + (r.get("error") or "") for r in failed), failed
    by_logger: dict[str, list[dict[str, str]]] = {}
    for record in worker_records:
        by_logger.setdefault(record["logger"], []).append(record)
    assert any(name.startswith("psycopg") for name in by_logger), sorted(by_logger)
    [warned] = by_logger["py.warnings"]
    assert "deprecated call" in warned["msg"] and warned["level"] == "WARNING"
    [crashed] = by_logger["threading"]
    assert crashed["level"] == "ERROR" and "helper" in crashed["msg"]
    assert "RuntimeError: helper thread failed" in (crashed.get("error") or crashed["msg"])
    [unformatted] = by_logger["taskfuse.logs"]
    assert "could not format a record of logger taskfuse.task.bad_log" in unformatted["msg"]
