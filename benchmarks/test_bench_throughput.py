"""The runtime at the speed of its store: no-op tasks through the Runner, beside the minimal
loop that does only the SQL, in the same run.

* runner: `Runner(workers=4)` drains N no-op tasks from a fresh store (submitted beforehand):
  claims in groups, four threads run the tasks, a completer commits outcomes in groups.
  Durable stores keep their defaults: SQLite synchronous=FULL, PostgreSQL
  synchronous_commit=on.
* minimal: the bare `jobs` table of test_bench_stores.MinimalRig, 4 threads, each claiming 32
  with one statement and completing its 32 in one transaction (the issue's "minimal grouped
  loop").
* table size: the same runner drain of N tasks when the table already holds N finished rows
  less (20k rows in all) or 1M - N finished rows more (1M rows in all), bulk-inserted before
  the clock starts: cost per task must stay flat as finished rows pile up.
* fleet: 1, 2 and 4 worker processes (benchmarks/fleet_worker.py, 4 threads each) draining
  one SQLite file or PostgreSQL schema, timed from a start signal after every process is
  ready until every process has seen the store drained and said so (not until the
  processes have exited); on SQLite, writers of different processes take turns on the
  file's lock.

Each runner benchmark's `extra_info` carries `tasks_per_s`; the minimal ones too, so ratios
come from one session. Run:

    python -m pytest benchmarks/test_bench_throughput.py --benchmark-only
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks.test_bench_stores import PG_URL, MinimalRig, _drop_schema, _need
from taskfuse.runtime import App, Runner
from taskfuse.store.memory import MemoryStore

N = 20_000
WORKERS = 4
ROOT = Path(__file__).resolve().parents[1]

app = App("bench")


@app.task("noop", timeout=60)
def noop(ctx: object, payload: object) -> None:
    return None


class RunnerRig:
    """A fresh store holding N no-op tasks per round (after `finished` rows already done);
    the round is one Runner draining it."""

    def __init__(self, kind: str, finished: int = 0, n: int = N) -> None:
        self.kind = kind
        self.finished = finished
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="bench-run-")
        self.store: Any = None
        self.schema = ""

    def url(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{os.path.join(self.tmp, uuid.uuid4().hex)}.db"
        self.schema = f"bench_{uuid.uuid4().hex[:12]}"
        return f"{PG_URL}?schema={self.schema}"

    def fresh(self) -> None:
        self.close()
        if self.kind == "memory":
            self.store = MemoryStore()
        else:
            from taskfuse.store import open_store

            self.store = open_store(self.url())
        if self.finished:
            from benchmarks.test_bench_stores import _fill_postgres, _fill_sqlite

            bulk = _fill_sqlite if self.kind == "sqlite" else _fill_postgres
            bulk(self.store, self.finished, pending=0)
            if self.kind == "postgres":
                _settle(self.schema)
            else:  # the bulk load's pages go to the database file now, not in a checkpoint
                self.store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # mid-round
        fill(self.store, self.n)

    def drain(self) -> None:
        with Runner(app, self.store, workers=WORKERS, heartbeat_s=10.0) as runner:
            assert runner.join(300)
        assert runner.stats.completed == self.n

    def close(self) -> None:
        if self.store is not None and hasattr(self.store, "close"):
            self.store.close()
        self.store = None
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


def _settle(schema: str) -> None:
    """Vacuum and checkpoint a bulk-loaded table before the clock starts, as a table that has
    held its finished rows a while would be. Without it the round measures what loading a
    million rows sets off (autovacuum and hint-bit writes over the new rows, a checkpoint of
    the load's pages with full-page images of every page first touched after it) while the
    runner drains, which a table in service does not see at every claim."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {schema}.tasks")
        conn.execute("CHECKPOINT")


def fill(store: Any, n: int = N) -> None:
    """n no-op tasks, submitted in chunks (as a producer would) before the clock starts."""
    from taskfuse.core.scheduler import Scheduler

    sched = Scheduler(store)
    spec = app.spec("noop")
    for at in range(0, n, 5_000):
        sched.submit_many([spec] * min(5_000, n - at), time.time())


def _record(benchmark: Any) -> None:
    median = benchmark.stats.stats.median
    benchmark.extra_info["tasks_per_s"] = round(N / median)


def measure_drains(benchmark: Any, rig: Any, rounds: int = 3, args: tuple[Any, ...] = ()
                   ) -> None:
    """Time `rig.drain` on a fresh store each round (its set-up untimed), close the rig
    whatever happens, and record tasks per second."""
    try:
        benchmark.pedantic(rig.drain, args=args, setup=rig.fresh, rounds=rounds, iterations=1)
    finally:
        rig.close()
    _record(benchmark)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_runner(benchmark, kind: str) -> None:
    _need(kind)
    benchmark.group = f"throughput: {N} no-op tasks, {WORKERS} threads ({kind})"
    measure_drains(benchmark, RunnerRig(kind))


@pytest.mark.parametrize("rows", [N, 1_000_000], ids=["20k", "1M"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runner_vs_table_size(benchmark, kind: str, rows: int) -> None:
    """N tasks drained from a table of `rows` rows: compare the 20k and 1M medians."""
    _need(kind)
    benchmark.group = f"throughput: {N} no-op tasks vs rows in the table ({kind})"
    benchmark.extra_info["rows"] = rows
    measure_drains(benchmark, RunnerRig(kind, finished=rows - N), rounds=5)


class MinimalN(MinimalRig):
    """MinimalRig at this file's N (or n)."""

    def __init__(self, kind: str, workers: int, n: int = N) -> None:
        super().__init__(kind, workers)
        self.n = n

    def fresh(self) -> None:
        import benchmarks.test_bench_stores as stores

        saved = dict(stores.N)
        stores.N.update({"sqlite": self.n, "postgres": self.n})
        try:
            super().fresh()
        finally:
            stores.N.update(saved)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_minimal_grouped_loop(benchmark, kind: str) -> None:
    _need(kind)
    benchmark.group = f"throughput: {N} no-op tasks, {WORKERS} threads ({kind})"
    measure_drains(benchmark, MinimalN(kind, WORKERS), args=(True,))


# -- a fleet: worker processes on one PostgreSQL schema --------------------------------------


class FleetRig:
    """P worker processes, each a Runner of WORKERS threads, draining one fresh store."""

    def __init__(self, processes: int, kind: str = "postgres") -> None:
        self.processes = processes
        self.kind = kind
        self.schema = ""
        self.tmp = tempfile.mkdtemp(prefix="bench-fleet-")
        self.procs: list[subprocess.Popen[str]] = []

    def fresh(self) -> None:
        from taskfuse.store import open_store

        self.close()
        if self.kind == "sqlite":
            url = f"sqlite:///{os.path.join(self.tmp, uuid.uuid4().hex)}.db"
        else:
            self.schema = f"bench_{uuid.uuid4().hex[:12]}"
            url = f"{PG_URL}?schema={self.schema}"
        store = open_store(url)
        try:
            fill(store)
        finally:
            store.close()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "benchmarks.fleet_worker", url, str(WORKERS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
            for _ in range(self.processes)]
        for proc in self.procs:  # every process ready before the clock starts
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def drain(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        claimed = 0
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            assert line and line[0] == "done", line
            claimed += int(line[1])
        assert claimed == N  # every task ran once
        # Timed until every process said "done": its interpreter's exit is not throughput.

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


@pytest.mark.parametrize("processes", [1, 2, 4])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_fleet(benchmark, kind: str, processes: int) -> None:
    _need(kind)
    benchmark.group = f"throughput: fleet on {kind}, {N} no-op tasks, {WORKERS} threads each"
    measure_drains(benchmark, FleetRig(processes, kind))
