"""taskfuse beside the queue people pick on PostgreSQL today, in the same run.

* taskfuse: `Runner(workers=4)` draining N no-op tasks from a fresh schema (the runner rig
  of test_bench_throughput: claims in groups, four threads, group commit).
* pgqueuer: its `QueueManager` in drain mode over one asyncpg connection, draining N no-op
  jobs enqueued beforehand into a fresh schema; at its default batch size (10) and at 128,
  the size that made it fastest on this machine (10, 32, 64 and 128 were tried), so the
  comparison is with the peer at its best as well as as shipped.

Both queues commit every outcome durably (synchronous_commit=on). pgqueuer is not a
dependency of taskfuse: `make bench-peers` installs it (the `peers` extra) and runs this
file; without it the file has nothing to compare and says so.

    python -m pytest benchmarks/test_bench_peers.py --benchmark-only
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from benchmarks.test_bench_stores import PG_URL, _drop_schema, _need
from benchmarks.test_bench_throughput import WORKERS, N, RunnerRig, measure_drains

pgqueuer = pytest.importorskip("pgqueuer", reason="pgqueuer not installed: make bench-peers")

GROUP = f"peers on PostgreSQL: {N} no-op tasks, taskfuse with {WORKERS} threads"
#: pgqueuer reads its schema from the environment once per process, so every round uses this
#: one, dropped and installed again before each round.
PGQ_SCHEMA = f"bench_pgq_{uuid.uuid4().hex[:12]}"
os.environ["PGQUEUER_SCHEMA"] = PGQ_SCHEMA


def test_taskfuse_runner(benchmark) -> None:
    _need("postgres")
    benchmark.group = GROUP
    measure_drains(benchmark, RunnerRig("postgres"))


class PgQueuerRig:
    """A fresh pgqueuer schema holding N no-op jobs per round; the round drains it."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.schema = ""
        self.done = 0

    def fresh(self) -> None:
        self.close()
        self.schema = PGQ_SCHEMA
        asyncio.run(self._fill())

    async def _connect(self) -> Any:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(PG_URL)
        return conn, AsyncpgDriver(conn), Queries(AsyncpgDriver(conn))

    async def _fill(self) -> None:
        conn, _, queries = await self._connect()
        try:
            await queries.install()
            for at in range(0, N, 5_000):
                k = min(5_000, N - at)
                await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        finally:
            await conn.close()

    def drain(self) -> None:
        asyncio.run(self._drain())
        assert self.done == N  # every job ran once

    async def _drain(self) -> None:
        from pgqueuer import PgQueuer
        from pgqueuer.types import QueueExecutionMode

        conn, driver, _ = await self._connect()
        self.done = 0
        pgq = PgQueuer(driver)

        @pgq.entrypoint("noop")
        async def noop(job: Any) -> None:
            self.done += 1

        try:
            await pgq.run(mode=QueueExecutionMode.drain, batch_size=self.batch_size)
        finally:
            await conn.close()

    def close(self) -> None:
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


@pytest.mark.parametrize("batch_size", [10, 128])
def test_pgqueuer(benchmark, batch_size: int) -> None:
    _need("postgres")
    benchmark.group = GROUP
    benchmark.extra_info["batch_size"] = batch_size
    measure_drains(benchmark, PgQueuerRig(batch_size))
