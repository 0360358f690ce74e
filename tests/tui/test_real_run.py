"""The monitor tells the truth about a real run: a `taskfuse worker` process on SQLite with
`--trace`, the follow view of its trace and the fleet view of its store, against
`taskfuse status --json`, at five moments (the last after the worker stopped).

The run holds still at each moment: its tasks wait for gate files the test writes
(`gate_app`). Every wait is for a signal: a state in the store, a sample in the trace that
says the same, a read of the trace up to where that sample ends. Tasks are submitted from
the test process, as `taskfuse submit` would from its own: the worker never sees them
enter, which is what once made the follow view count PENDING below zero.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from taskfuse.store import open_store
from taskfuse.trace import TraceError, read_trace
from tests.tui.screen import text_of
from tui.app import MonitorApp, create_app
from tui.fleet_app import FleetApp, open_fleet
from tui.widgets.batches import SHORT, BatchPanel
from tui.widgets.fleet import StatesPanel

ROOT = Path(__file__).resolve().parents[2]
STATES = [s.value for s in TaskStatus]
MARKS = {mark: state for state, mark, _ in SHORT}
#: The longest any readiness wait may take before the test fails (a hung worker).
PATIENCE_S = 120.0

Counts = dict[str, int]


def wait_for(what: str, ready: Callable[[], bool]) -> None:
    """Wait until `ready()` (a read of a file or a store: each try is a real signal)."""
    deadline = time.monotonic() + PATIENCE_S
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def status_json(url: str) -> tuple[Counts, dict[str, Counts]]:
    """What `taskfuse status --json` says: counts by state, and by batch."""
    out = subprocess.run([sys.executable, "-m", "taskfuse.cli", "status", "--store", url,
                          "--json"], capture_output=True, text=True, check=True, cwd=ROOT)
    doc = json.loads(out.stdout)
    return doc["counts"], {b["batch_id"]: b["counts"] for b in doc["batches"]}


def state_counts(text: str) -> Counts:
    """Counts by state from the task view's tabs (`[1]pending 4`) or the fleet's panel."""
    tabs = dict(re.findall(r"\[\d\](\w+) ≥?(-?[\d,]+)", text))
    if tabs:
        return {s: int(tabs[s.lower()].replace(",", "")) for s in STATES}
    return {s: int(re.search(rf"{s} ([\d,]+)", text)[1].replace(",", ""))  # type: ignore[index]
            for s in STATES}


def batch_counts(text: str) -> dict[str, Counts]:
    """Counts by state of each batch line of the batch panel (`b1 ... ✓2 ▶2 ○2 p99 -`)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] in ("no", "+"):
            continue
        marks = {MARKS[w[0]]: int(w[1:].replace(",", "")) for w in words if w[:1] in MARKS}
        out[words[0]] = {s: marks.get(s, 0) for s in STATES}
    return out


def nonzero(by_batch: dict[str, Counts]) -> dict[str, Counts]:
    return {b: {s: n for s, n in c.items() if n} for b, c in by_batch.items()}


class Run:
    """The worker process, its store and trace, and the gates of its tasks."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.url = f"sqlite:///{tmp / 'tasks.db'}"
        self.trace = tmp / "worker.trace"
        self.sched = Scheduler(open_store(self.url))
        self.err = open(tmp / "worker.err", "w")  # noqa: SIM115 - closed in stop()
        paths = [str(ROOT), str(ROOT / "tests" / "tui")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskfuse.cli", "worker", "--app", "gate_app:app",
             "--store", self.url, "--workers", "2", "--trace", str(self.trace)],
            cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=self.err)

    def submit(self, batch: str, n: int) -> list[str]:
        ids = [f"{batch}-{k}" for k in range(n)]
        specs = [TaskSpec("gate", {"gate": str(self.tmp / i)}, task_id=i, max_retry=0)
                 for i in ids]
        self.sched.submit_batch(specs, time.time(), batch)
        return ids

    def release(self, task_id: str, how: str = "ok") -> None:
        (self.tmp / task_id).write_text(how)

    def running(self) -> list[str]:
        return sorted(t.task_id for t in self.sched.store.running())

    def settle(self, want: Counts) -> int:
        """Wait until the store holds `want` and the trace has a sample saying so (the
        worker's sampler writes the tasks it discovered before that sample); answers the
        trace's size then."""
        wait_for(f"store {want}", lambda: self._store() == want)
        wait_for(f"a sample of {want}", lambda: self._sampled() == want)
        return self.trace.stat().st_size

    def _store(self) -> Counts:
        return {s.value: n for s, n in self.sched.store.counts().items()}

    def _sampled(self) -> Counts | None:
        try:
            tr = read_trace(self.trace)
        except TraceError:
            return None
        if not len(tr.times):
            return None
        last = {name: int(col[-1]) for name, col in tr.columns.items()
                if name in ("queue_depth", "running") or name.startswith("done.")}
        # the worker's own running count is the store's when it is the only worker
        return {s: last.get(f"done.{s}", 0) for s in STATES} | {
            "PENDING": last["queue_depth"], "RUNNING": last["running"]}

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(PATIENCE_S)
        self.err.close()
        return code


async def follow_read(app: MonitorApp, pilot: Pilot[int], size: int) -> None:
    """Let the follow view read the trace up to `size` bytes."""
    while app.source.read_upto < size:
        app.poll_now()
        await app.wait_idle()
    await pilot.pause()


async def fleet_counts(url: str) -> tuple[Counts, dict[str, Counts]]:
    """What a fresh fleet view of the store shows after one poll."""
    app: FleetApp = open_fleet(url, poll_s=3600)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.wait_idle()
            await pilot.pause()
            screen = app.screen
            return (state_counts(text_of(screen.query_one(StatesPanel))),
                    batch_counts(text_of(screen.query_one(BatchPanel))))
    finally:
        app.store.close()  # type: ignore[attr-defined]


def test_follow_and_fleet_views_of_a_real_worker_equal_its_store(tmp_path: Path) -> None:
    run = Run(tmp_path)
    seen: list[str] = []

    async def compare(app: MonitorApp, pilot: Pilot[int], want: Counts, name: str) -> None:
        size = run.settle(want)
        counts, batches = status_json(run.url)
        assert counts == want, name
        await follow_read(app, pilot, size)
        await pilot.press("t")
        follow_states = state_counts(text_of(app.screen.query_one("#task-filter")))
        await pilot.press("d")
        follow_batches = batch_counts(text_of(app.screen.query_one(BatchPanel)))
        fleet_states, fleet_batches = await fleet_counts(run.url)
        assert follow_states == counts, name
        assert fleet_states == counts, name
        assert nonzero(follow_batches) == nonzero(batches), name
        assert nonzero(fleet_batches) == nonzero(batches), name
        seen.append(name)

    async def main() -> None:
        wait_for("the worker's trace", lambda: run.trace.exists() and run.trace.stat().st_size > 0)
        app = create_app(run.trace, follow=True, poll_s=3600)
        async with app.run_test(size=(100, 30)) as pilot:
            await app.wait_idle()
            z = dict.fromkeys(STATES, 0)
            run.submit("b1", 6)
            await compare(app, pilot, z | {"PENDING": 4, "RUNNING": 2}, "queued")
            for task in run.running():
                run.release(task)
            await compare(app, pilot, z | {"PENDING": 2, "RUNNING": 2, "SUCCESS": 2}, "two done")
            run.submit("b2", 2)
            first, second = run.running()
            run.release(first, "fail")
            run.release(second)
            await compare(app, pilot, z | {"PENDING": 2, "RUNNING": 2, "SUCCESS": 3, "FAILED": 1},
                          "one failed, a second batch")
            for task in [f"b1-{k}" for k in range(6)] + ["b2-0", "b2-1"]:
                if not (run.tmp / task).exists():
                    run.release(task)
            await compare(app, pilot, z | {"SUCCESS": 7, "FAILED": 1}, "all ended")
            assert run.stop() == 0
            assert read_trace(run.trace).complete
            await compare(app, pilot, z | {"SUCCESS": 7, "FAILED": 1}, "worker stopped")
            assert app.model.complete

    try:
        asyncio.run(main())
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        run.sched.store.close()  # type: ignore[attr-defined]
    assert len(seen) == 5
