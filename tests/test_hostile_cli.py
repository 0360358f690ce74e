"""The small hostile inputs of the operator command and the lab, one test each.

A port that is not a number, a known idempotency key with a new batch, cancelling a batch
that ended or runs, a reader that closes the pipe, a store URL in a missing directory, and
reading the simulation's event count twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.scenario import load_scenario
from lab.simulate.sim import Simulation
from taskfuse.cli import main
from taskfuse.core.scheduler import Scheduler, SchedulerError
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.store import open_store
from taskfuse.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_port_that_is_not_a_number_is_a_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "status", "--store", "postgresql://u:p@127.0.0.1:notaport/x")
    assert code == 2 and err.count("\n") == 1
    assert "bad PostgreSQL URL 'postgresql://u:***@127.0.0.1:notaport/x': expected a port " \
           "number, got 'notaport'" in err


def test_a_known_key_with_a_new_batch_creates_no_batch(capsys: pytest.CaptureFixture[str],
                                                       db: str) -> None:
    code, out, _ = run(capsys, "submit", "--store", db, "echo", "--key", "K", "--json")
    first = json.loads(out)["task"]
    code, out, _ = run(capsys, "submit", "--store", db, "echo", "--key", "K", "--batch", "b1",
                       "--cap", "2", "--json")
    again = json.loads(out)
    assert code == 0 and not again["created"] and again["task"]["task_id"] == first["task_id"]
    code, out, err = run(capsys, "status", "--store", db, "b1")
    assert code == 2 and "unknown batch 'b1'" in err
    code, out, _ = run(capsys, "submit", "--store", db, "echo", "--key", "K2", "--batch", "b1",
                       "--cap", "2", "--json")
    assert json.loads(out)["task"]["batch_id"] == "b1"
    code, out, _ = run(capsys, "status", "--store", db, "b1", "--json")
    assert json.loads(out)["cap"] == 2 and json.loads(out)["total"] == 1


def _batch_without_record(store: MemoryStore, n: int) -> Scheduler:
    """Tasks that carry a batch id but no batch record (as Runner.submit_many makes them)."""
    sched = Scheduler(store)
    sched.submit_many([TaskSpec("k") for _ in range(n)], 0.0, batch_id="b")
    return sched


def test_cancel_batch_on_a_batch_whose_tasks_all_run() -> None:
    store = MemoryStore()
    sched = _batch_without_record(store, 3)
    sched.claim("w", 1.0, 3)
    assert store.counts("b")[TaskStatus.RUNNING] == 3
    assert sched.cancel_batch("b", 2.0) == 3
    assert store.counts("b")[TaskStatus.CANCELED] == 3
    assert sched.cancel_batch("b", 3.0) == 0  # all ended: known, nothing left to cancel
    with pytest.raises(SchedulerError, match="unknown batch 'nope'"):
        sched.cancel_batch("nope", 3.0)


def test_cancel_of_a_finished_batch_says_so(capsys: pytest.CaptureFixture[str],
                                            db: str) -> None:
    store = open_store(db)
    try:
        sched = _batch_without_record(store, 2)  # type: ignore[arg-type]
        for _ in range(2):
            [task] = sched.claim("w", 1.0, 1).tasks  # type: ignore[union-attr]
            sched.complete(task, Outcome.success(None), 2.0)
    finally:
        store.close()
    code, out, err = run(capsys, "cancel", "--store", db, "b")
    assert code == 1 and "batch b has no unfinished task; nothing to cancel" in out, err


@pytest.mark.parametrize("argv", [
    ["lab.cli", "schema"],
    ["taskfuse.cli", "status", "--store", "memory://"],
    ["taskfuse.cli", "--help"],
])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list[str]) -> None:
    """As `lab schema | head` does: the pipe is closed before the command writes."""
    reader_gone = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader_gone.stdout is not None
    reader_gone.stdout.close()
    _, err = reader_gone.communicate(timeout=60)
    assert b"Traceback" not in err and b"Exception ignored" not in err, err
    assert reader_gone.returncode in (0, 141)  # 0 when everything fit before the close


def test_lab_schema_into_a_closed_pipe_exits_141_without_a_traceback() -> None:
    proc = subprocess.run(f"{sys.executable} -m lab.cli schema | true", shell=True, cwd=ROOT,
                          capture_output=True, executable="/bin/bash")
    assert b"Traceback" not in proc.stderr and b"Exception ignored" not in proc.stderr
    check = subprocess.run(f"set -o pipefail; {sys.executable} -m lab.cli schema | true",
                           shell=True, cwd=ROOT, capture_output=True, executable="/bin/bash")
    assert check.returncode in (0, 141)


def test_a_store_in_a_missing_directory_is_not_created(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    code, _, err = run(capsys, "worker", "--store", f"sqlite:///{missing / 'x.db'}", "--app",
                       "tests.runtime.sample_app:app", "--drain")
    assert code == 2 and err.count("\n") == 1 and "no directory" in err
    assert not (tmp_path / "no").exists()


def test_reading_the_simpy_event_count_spends_no_event_id() -> None:
    sim = Simulation(load_scenario(ROOT / "scenarios" / "seed-demo.yaml"))
    sim.run()
    counts = [sim.simpy_events for _ in range(3)]
    assert counts[0] == counts[1] == counts[2] > 0
    again = Simulation(load_scenario(ROOT / "scenarios" / "seed-demo.yaml"))
    again.run()
    assert again.simpy_events == counts[0]  # deterministic, and the reads changed nothing
