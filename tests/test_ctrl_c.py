"""Ctrl-C stops every long command: exit 130, no child process left, no port left open.

Every command is started the hostile way: with SIGINT *ignored*, as a background job of a
script (and some CI runners) starts it. Python then installs no KeyboardInterrupt handler of
its own, and before the fix Ctrl-C did nothing. Each test waits for a readiness signal the
command gives (a progress line, a log line, its child processes), never a fixed sleep.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 60.0
pytestmark = pytest.mark.slow

# A small world whose batch runs long enough (a few seconds) to be interrupted in the middle.
SCENARIO = """
name: ctrl-c
seed: 1
horizon_s: 100000
workers: 4
pools:
  db: {size: 2}
downstreams:
  partner:
    provider: {latency: 0.05}
batches:
  - id: work
    count: 200000
    program:
      - db: {pool: db, query: 0.01}
      - call: {downstream: partner}
"""


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(args: list[str], cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_ignoring_sigint)


def wait_for(proc: subprocess.Popen[bytes], ready: Callable[[str], bool]) -> str:
    """Read stderr as it comes until `ready(everything so far)`; the text read."""
    assert proc.stderr is not None
    seen = ""
    end = time.monotonic() + WAIT_S
    while not ready(seen):
        assert time.monotonic() < end, f"never ready; stderr so far: {seen!r}"
        readable, _, _ = select.select([proc.stderr], [], [], 0.1)
        if readable:
            chunk = os.read(proc.stderr.fileno(), 65536).decode(errors="replace")
            assert chunk or proc.poll() is None, f"exited {proc.poll()} before ready: {seen!r}"
            seen += chunk
    return seen


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children of children too), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def interrupt(proc: subprocess.Popen[bytes]) -> tuple[int, str, set[int]]:
    """SIGINT now; (exit status, rest of stderr, the descendants it had when interrupted)."""
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode(errors="replace"), children


def assert_all_gone(pids: set[int]) -> None:
    """Orphans are reaped by the system; allow it a moment, then none may be left."""
    end = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    return path


def test_simulate(scenario: Path, tmp_path: Path) -> None:
    proc = start(["lab.cli", "simulate", str(scenario), "--progress", "always",
                  "--trace", str(tmp_path / "run.trace")])
    wait_for(proc, lambda err: re.search(r"\] +\d+%", err) is not None)
    code, err, _ = interrupt(proc)
    assert code == 130 and "lab: interrupted" in err


@pytest.mark.parametrize("command", [
    ["sweep", "--vary", "workers=2,3,4,5", "--seeds", "2"],
    ["size", "--vary", "workers=2,3,4,5", "--minimize", "makespan_s", "--seeds", "2"],
])
def test_sweep_and_size_stop_their_worker_processes(scenario: Path, tmp_path: Path,
                                                     command: list[str]) -> None:
    proc = start(["lab.cli", command[0], str(scenario), *command[1:], "--jobs", "2",
                  "--out", str(tmp_path / "runs"), "--set", "batches.work.count=20000"])
    end = time.monotonic() + WAIT_S
    while len(descendants(proc.pid)) < 2:  # the process pool is up
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.05)
    code, err, children = interrupt(proc)
    assert code == 130 and "interrupted" in err, err
    assert children and err.count("\n") == 1, err
    assert_all_gone(children)


def test_compare_stops_its_servers(scenario: Path) -> None:
    proc = start(["lab.cli", "compare", str(scenario), "--time-scale", "1",
                  "--set", "batches.work.count=2000"])
    seen = wait_for(proc, lambda err: "(pid " in err)
    found = re.search(r"127\.0\.0\.1:(\d+) \(pid (\d+)\)", seen)
    assert found, seen
    port, child = int(found[1]), int(found[2])
    code, err, children = interrupt(proc)
    assert code == 130 and "interrupted" in err, err
    assert_all_gone({child, *children})
    assert not listening(port)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def test_worker_stops_gracefully_with_130(db: str) -> None:
    proc = start(["taskfuse.cli", "worker", "--store", db, "--app",
                  "tests.runtime.sample_app:app", "--metrics-port", "0"])
    seen = wait_for(proc, lambda err: "started" in err)
    port = int(re.search(r"metrics at http://[^:]+:(\d+)/", seen)[1])  # type: ignore[index]
    code, err, children = interrupt(proc)
    assert code == 130, err
    assert "SIGINT: finishing running tasks" in err and "stopped" in err
    assert_all_gone(children)
    assert not listening(port)


def test_sweeper_stops_with_130(db: str) -> None:
    from taskfuse.store import open_store

    open_store(db).close()  # the sweeper only reads and moves: the file must exist
    proc = start(["taskfuse.cli", "sweep", "--store", db, "--every", "0.05"])
    wait_for(proc, lambda err: "sweeper started" in err)
    code, err, _ = interrupt(proc)
    assert code == 130, err


def start_in_terminal(args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """A monitor command in a pseudo-terminal of 80x24 (it needs one), SIGINT ignored."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color",
           "COLUMNS": "80", "LINES": "24"}
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=env, stdin=slave,
                            stdout=slave, stderr=slave, preexec_fn=_ignoring_sigint)
    os.close(slave)
    return proc, master


def drawn(master: int, text: bytes) -> None:
    """Read the terminal until the monitor drew `text` (its first screen)."""
    seen, end = b"", time.monotonic() + WAIT_S
    while text not in seen:
        assert time.monotonic() < end, f"never drew {text!r}: {seen[-400:]!r}"
        if select.select([master], [], [], 0.1)[0]:
            try:
                seen += os.read(master, 65536)
            except OSError:  # the terminal closed: the command ended
                break
    assert text in seen, seen[-400:]


def interrupt_monitor(proc: subprocess.Popen[bytes], master: int) -> int:
    proc.send_signal(signal.SIGINT)
    end = time.monotonic() + WAIT_S
    while proc.poll() is None and time.monotonic() < end:  # keep the terminal drained
        if select.select([master], [], [], 0.1)[0]:
            try:
                os.read(master, 65536)
            except OSError:
                break
    try:
        return proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.fixture
def followed(tmp_path: Path) -> Path:
    from tests.tui.tracegen import write_incident_trace

    path = tmp_path / "run.trace"
    write_incident_trace(path, 300, complete=False)
    return path


@pytest.mark.parametrize("follow", [True, False])
def test_watch_ends_on_sigint_with_130(followed: Path, follow: bool) -> None:
    proc, master = start_in_terminal(
        ["lab.cli", "watch", *(["--follow"] if follow else []), str(followed)])
    drawn(master, b"queue")
    assert interrupt_monitor(proc, master) == 130


def test_watch_store_ends_on_sigint_with_130(db: str) -> None:
    from taskfuse.store import open_store

    open_store(db).close()
    proc, master = start_in_terminal(["lab.cli", "watch", "--store", db])
    drawn(master, b"state")
    assert interrupt_monitor(proc, master) == 130


def test_simulate_watch_ends_on_sigint_with_130(scenario: Path) -> None:
    proc, master = start_in_terminal(["lab.cli", "simulate", str(scenario), "--watch",
                                      "--no-trace"])
    drawn(master, b"queue")
    assert interrupt_monitor(proc, master) == 130
