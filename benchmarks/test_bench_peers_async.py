"""10,000 async calls in flight on PostgreSQL: taskfuse beside pgqueuer and procrastinate.

Issue 24's goal: with 10,000 in flight on PostgreSQL (ideal 10,000 tasks/s, above what the
store allows), the async executor reaches >= 75 % of its own no-op rate on the same database
in the same run, and >= 2x pgqueuer and procrastinate running the same async task against
the same server and database. One run, side by side, a fresh schema per round:

* taskfuse: N tasks of an `async def` kind, `async_concurrency: 10000`, on the async
  executor (test_bench_async's `Rig`: the runner is started and up untimed; its timing, here
  alone: the submission in chunks of 2,000 to the last commit, CPU the process's less the
  submitting thread's);
* taskfuse no-op: the same rig and app, N `async def` tasks that do nothing (the store's and
  the runtime's own ceiling);
* a bare loop: no queue, the same N calls on one asyncio loop with a semaphore of 10,000
  (what this client and server make of the machine: the call path's own ceiling);
* pgqueuer: its `QueueManager` (`PgQueuer` over one asyncpg connection) in drain mode, one
  entrypoint with no per-entrypoint limit (`concurrency_limit=0`), the worker's cap
  `max_concurrent_tasks` = 10,000 (the in-flight bound; unlimited would let it hold all N);
  at its default batch of 10 and at 1,000 (its status-log buffer flushes at the batch size);
* procrastinate: an `App` over a `PsycopgConnector` (psycopg 3 pool of `PROC_POOL`
  connections), `run_worker_async(concurrency=10000, wait=False)`.

Every task makes the SAME call (`KeepAlive.call`): GET /sleep/1.0 to the asyncio HTTP server
of tests/runtime/aioserver.py, in a process of its own, over a keep-alive connection taken
from the worker's pool (a deque of (reader, writer) pairs; one is opened when none is idle)
and put back once the head and the 2-byte body are read, as async HTTP clients do. The peers'
rounds time the enqueue (in chunks of 2,000, like taskfuse's submission, reported apart as
`enqueue_s`) and the drain until every job is done and recorded; their worker runs in this
process, so their CPU per task includes the enqueue. All three commit every outcome durably
(synchronous_commit=on). With TASKFUSE_BENCH_PEERS_WARM set, every worker's pool holds
10,000 open connections before the timed part (the first wave's connects cost this client
seconds on a busy machine). `extra_info`: `tasks_per_s`, `cpu_ms_per_task`, `tail_s` (from
the last call's answer to the end of the round), `connections` (opened; with cold pools the
most calls in flight at once); for taskfuse's calls `pct_of_noop`, `pct_of_bare` and
`x_pgqueuer_b10` / `x_pgqueuer_b1000` / `x_procrastinate`, filled in as those rounds end.

The peers are not dependencies of taskfuse: `make bench-peers` installs them (the `peers`
extra) and runs this file; without them it has nothing to compare and says so.

    python -m pytest benchmarks/test_bench_peers_async.py --benchmark-only
    TASKFUSE_BENCH_PEERS_N=10000 python -m pytest benchmarks/test_bench_peers_async.py ...
    TASKFUSE_BENCH_PEERS_WARM=1 ...   # every pool starts with 10,000 open connections
    TASKFUSE_BENCH_PROC_CONCURRENCY=1000 ...   # procrastinate's worker concurrency
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

import pytest

pytest.importorskip("pgqueuer", reason="pgqueuer not installed: make bench-peers")
pytest.importorskip("asyncpg", reason="asyncpg not installed: make bench-peers")
pytest.importorskip("procrastinate", reason="procrastinate not installed: make bench-peers")

# pgqueuer reads its schema from the environment once per process: the no-op peers file and
# this one share its name (dropped and installed again before each round).
from benchmarks.keepalive import KeepAlive, bare_calls, request
from benchmarks.test_bench_async import Rig
from benchmarks.test_bench_peers import PGQ_SCHEMA
from benchmarks.test_bench_stores import PG_URL, _drop_schema, _need
from taskfuse.limits.schema import Limits
from taskfuse.runtime import App
from tests.runtime.aioserver import aioserver_process

IN_FLIGHT = 10_000
CALL_S = 1.0
N = int(os.environ.get("TASKFUSE_BENCH_PEERS_N", "30000"))
WORKERS = 4
_CHUNK = 2_000
#: procrastinate's psycopg pool: every job's end takes a connection for its UPDATE, and the
#: fetch of the next job waits behind them in a pool of psycopg's default 4.
PROC_POOL = 20
#: Every worker's pool starts the round with IN_FLIGHT idle connections (opened untimed): the
#: runtimes without the first wave's 10,000 connects, which cost this client seconds.
WARM = bool(os.environ.get("TASKFUSE_BENCH_PEERS_WARM"))
GROUP = (f"peers async on PostgreSQL: {N} tasks x one {CALL_S:g}s HTTP call, {IN_FLIGHT} "
         f"in flight{', warm connections' if WARM else ''}")
KeepAlive.request = request(CALL_S)



def make_app() -> App:
    limits = Limits.model_validate({"async_concurrency": IN_FLIGHT, "task_timeout_s": 300})
    app = App.from_limits(limits, "bench-peers-async")

    @app.task("call")
    async def call(ctx: Any, payload: Any) -> int:
        return await KeepAlive.call()

    @app.task("noop")
    async def noop(ctx: Any, payload: Any) -> None:
        return None

    return app


APP = make_app()


@pytest.fixture(scope="module")
def server() -> Any:
    _need("postgres")
    with aioserver_process() as url:
        KeepAlive.port = int(url.rsplit(":", 1)[1])
        yield url


class Results:
    """Rates of this run's rounds, so taskfuse's calls can be read against the others."""

    rates: ClassVar[dict[str, float]] = {}
    calls_info: ClassVar[dict[str, Any] | None] = None

    @classmethod
    def record(cls, name: str, rate: float, extra_info: dict[str, Any]) -> None:
        cls.rates[name] = rate
        if name == "taskfuse":
            cls.calls_info = extra_info
        info, mine = cls.calls_info, cls.rates.get("taskfuse")
        if info is None or mine is None:
            return
        for other, key in (("noop", "pct_of_noop"), ("bare", "pct_of_bare"),
                           ("pgqueuer_b10", "x_pgqueuer_b10"),
                           ("pgqueuer_b1000", "x_pgqueuer_b1000"),
                           ("procrastinate", "x_procrastinate")):
            if other in cls.rates:
                ratio = mine / cls.rates[other]
                info[key] = round(100 * ratio, 1) if key.startswith("pct") else round(ratio, 2)


class TaskfuseRig(Rig):
    """test_bench_async's rig on this file's app (`async_concurrency: 10000`)."""

    def __init__(self, kind: str) -> None:
        super().__init__("postgres", "async", kind, N, WORKERS,
                         warm=IN_FLIGHT if WARM and kind == "call" else 0)
        self.app = APP
        self.pool = KeepAlive.fresh()
        self.end = 0.0

    def fresh(self) -> None:
        super().fresh()  # a fresh keep-alive pool too (`Clients.fresh`), warmed and closed
        self.pool = KeepAlive.current

    def drain(self) -> None:
        super().drain()
        self.end = time.perf_counter()


class PeerRig:
    """A peer's round: a fresh schema and event loop (untimed), then enqueue N jobs and drain
    them on that loop (timed); the connections and the loop are closed after, untimed."""

    name = ""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool = KeepAlive.fresh()
        self.schema = ""
        self.enqueue_s = 0.0
        self.end = 0.0
        self.cpu: list[float] = []

    def fresh(self) -> None:
        self.close()
        self.loop = asyncio.new_event_loop()
        self.pool = KeepAlive.fresh()
        self.loop.run_until_complete(self.setup())
        if WARM:
            self.loop.run_until_complete(self.pool.warm(IN_FLIGHT))

    def drain(self) -> None:
        assert self.loop is not None
        cpu = time.process_time()
        start = time.perf_counter()
        self.loop.run_until_complete(self.enqueue())
        self.enqueue_s = time.perf_counter() - start
        self.loop.run_until_complete(self.work())
        self.end = time.perf_counter()
        self.cpu.append(time.process_time() - cpu)
        assert self.pool.calls == N, (self.pool.calls, N)  # every job ran once

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.pool.aclose())
            self.loop.run_until_complete(self.teardown())
            self.loop.close()
            self.loop = None
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""

    async def setup(self) -> None:
        raise NotImplementedError

    async def enqueue(self) -> None:
        raise NotImplementedError

    async def work(self) -> None:
        raise NotImplementedError

    async def teardown(self) -> None:
        return None


class BareRig(PeerRig):
    """No queue at all: N calls on one asyncio loop, IN_FLIGHT at once under a semaphore (the
    floor of the call path: this client and server on this machine)."""

    name = "bare"

    async def setup(self) -> None:
        return None

    async def enqueue(self) -> None:
        return None

    async def work(self) -> None:
        await bare_calls(N, IN_FLIGHT)


class PgQueuerRig(PeerRig):
    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.name = f"pgqueuer_b{batch_size}"

    async def _queries(self) -> tuple[Any, Any]:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(PG_URL)
        return conn, Queries(AsyncpgDriver(conn))

    async def setup(self) -> None:
        self.schema = PGQ_SCHEMA
        _drop_schema(self.schema)
        conn, queries = await self._queries()
        try:
            await queries.install()
        finally:
            await conn.close()

    async def enqueue(self) -> None:
        conn, queries = await self._queries()
        try:
            for at in range(0, N, _CHUNK):
                k = min(_CHUNK, N - at)
                await queries.enqueue(["call"] * k, [None] * k, [0] * k)
        finally:
            await conn.close()

    async def work(self) -> None:
        import asyncpg
        from pgqueuer import PgQueuer
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.types import QueueExecutionMode

        conn = await asyncpg.connect(PG_URL)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("call", concurrency_limit=0)
        async def call(job: Any) -> None:
            await KeepAlive.call()

        try:
            await pgq.run(mode=QueueExecutionMode.drain, batch_size=self.batch_size,
                          max_concurrent_tasks=IN_FLIGHT)
        finally:
            await conn.close()


class ProcrastinateRig(PeerRig):
    name = "procrastinate"

    def __init__(self, concurrency: int) -> None:
        super().__init__()
        self.concurrency = concurrency
        self.app: Any = None
        self.task: Any = None

    async def setup(self) -> None:
        import procrastinate
        import psycopg

        self.schema = f"bench_proc_{os.urandom(6).hex()}"
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(f"CREATE SCHEMA {self.schema}")
        connector = procrastinate.PsycopgConnector(
            conninfo=PG_URL, kwargs={"options": f"-c search_path={self.schema}"},
            min_size=4, max_size=PROC_POOL)
        self.app = procrastinate.App(connector=connector)

        @self.app.task(name="call")
        async def call() -> None:
            await KeepAlive.call()

        self.task = call
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()

    async def enqueue(self) -> None:
        for at in range(0, N, _CHUNK):
            await self.task.batch_defer_async(*([{}] * min(_CHUNK, N - at)))

    async def work(self) -> None:
        await self.app.run_worker_async(concurrency=self.concurrency, wait=False,
                                        install_signal_handlers=False)

    async def teardown(self) -> None:
        if self.app is not None:
            await self.app.close_async()
            self.app = None


def measure(benchmark: Any, rig: Any, name: str) -> None:
    benchmark.group = GROUP
    try:
        benchmark.pedantic(rig.drain, setup=rig.fresh, rounds=1, iterations=1)
        tail = rig.end - rig.pool.last if rig.pool.calls else None
        opened = rig.pool.opened
    finally:
        rig.close()
    rate = N / benchmark.stats.stats.median
    info = benchmark.extra_info
    info["tasks_per_s"] = round(rate)
    info["cpu_ms_per_task"] = round(1000 * min(rig.cpu) / N, 4)
    if tail is not None:
        info["tail_s"] = round(tail, 3)
        info["connections"] = opened
    if isinstance(rig, PeerRig):
        info["enqueue_s"] = round(rig.enqueue_s, 3)
    info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    Results.record(name, rate, info)


def test_taskfuse_calls(benchmark, server) -> None:
    benchmark.extra_info["async_concurrency"] = IN_FLIGHT
    measure(benchmark, TaskfuseRig("call"), "taskfuse")


def test_taskfuse_noop(benchmark, server) -> None:
    measure(benchmark, TaskfuseRig("noop"), "noop")


def test_bare_loop(benchmark, server) -> None:
    measure(benchmark, BareRig(), "bare")


@pytest.mark.parametrize("batch_size", [10, 1000])
def test_pgqueuer(benchmark, server, batch_size: int) -> None:
    benchmark.extra_info.update(batch_size=batch_size, max_concurrent_tasks=IN_FLIGHT)
    measure(benchmark, PgQueuerRig(batch_size), f"pgqueuer_b{batch_size}")


def test_procrastinate(benchmark, server) -> None:
    concurrency = int(os.environ.get("TASKFUSE_BENCH_PROC_CONCURRENCY", str(IN_FLIGHT)))
    benchmark.extra_info.update(concurrency=concurrency, pool_size=PROC_POOL)
    measure(benchmark, ProcrastinateRig(concurrency), "procrastinate")
