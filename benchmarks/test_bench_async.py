"""The async executor beside the thread executor, side by side in one run, on every store.

* calls: N tasks, each awaiting one 1 s call to a local HTTP server (asyncio, in a process
  of its own, over real sockets on 127.0.0.1), IN_FLIGHT = 4,000 at once: the async kind
  with `async_concurrency` 4,000, the thread kind with 4,000 worker threads. Three clients:
  a pooled keep-alive connection (`benchmarks.keepalive`, as any HTTP client keeps one),
  httpx (`AsyncClient` / `Client`, SHARDS of them), and a new socket per call (asyncio
  streams / `socket`); and a 1 s sleep standing in for the call (as issue 24's table),
  which shows the runtime's own cost without a client's or a server's. Ideal rate:
  IN_FLIGHT / 1 s.
* no-op: N_NOOP tasks that do nothing, async (on the loop) beside threads (4 workers).
* bare loop: the keep-alive calls with no queue at all, IN_FLIGHT at once on one asyncio
  loop (`keepalive.bare_calls`): the floor this client and server leave on this machine.
  The keep-alive rounds report `pct_of_bare` against it (it runs first).

Every round starts a Runner on an empty store and waits until its threads are up (untimed),
then times the submission of the tasks (in chunks, as a producer would) until the last
commit. `extra_info` has `tasks_per_s`, `pct_of_ideal` (calls) and `cpu_ms_per_task`: the
worker process's CPU (`time.process_time`) over the round, less the submitting thread's
own (`time.thread_time`), per task. `steady_per_s` and `steady_pct_of_ideal` (calls) count
the ends in the steady part of the round, read from the store: from one call's length after
the last submission (every slot has turned over since) to one call's length before the last
end (the tail, where slots empty for want of tasks); the whole round's rate also carries the
producer's submission and that tail. Goals (issue 24): async >= 90 % of ideal and <= 0.1 ms
CPU per task on every store; async no-op no slower than thread no-op.

    python -m pytest benchmarks/test_bench_async.py --benchmark-only
    TASKFUSE_BENCH_ASYNC_N=40000 python -m pytest benchmarks/test_bench_async.py ...
    TASKFUSE_BENCH_ASYNC_HTTPX=1 ...     # the httpx client too (slow: minutes a round)
    TASKFUSE_BENCH_ASYNC_WARM=1 ...      # keep-alive pools start with IN_FLIGHT open
                                         # connections (untimed), for every round alike
    TASKFUSE_BENCH_HEAP=plain ...        # the interpreter's collector settings (default:
                                         # the worker command's, taskfuse.tuning.worker_heap)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import tempfile
import time
import uuid
from typing import Any, ClassVar

import httpx
import pytest

from benchmarks.keepalive import KeepAlive, SyncKeepAlive, bare_calls, request
from benchmarks.test_bench_stores import PG_URL, _drop_schema, _need
from taskfuse.limits.schema import Limits
from taskfuse.runtime import App, Runner
from taskfuse.store.memory import MemoryStore
from taskfuse.tuning import worker_heap
from tests.runtime.aioserver import aioserver_process

IN_FLIGHT = 4_000
CALL_S = 1.0
N = int(os.environ.get("TASKFUSE_BENCH_ASYNC_N", "20000"))
#: "worker": the heap as `taskfuse worker` keeps it (frozen after start, rare collections);
#: "plain": the interpreter's defaults, as a Runner embedded in another program has them.
HEAP = os.environ.get("TASKFUSE_BENCH_HEAP", "worker")
#: Every keep-alive pool starts the round with IN_FLIGHT open connections (opened untimed):
#: without the first wave's 4,000 connects, which cost this client seconds (module doc).
WARM = bool(os.environ.get("TASKFUSE_BENCH_ASYNC_WARM"))
N_NOOP = int(os.environ.get("TASKFUSE_BENCH_ASYNC_NOOP", "5000"))
NOOP_WORKERS = 4
_CHUNK = 2_000
#: httpx costs ~4 ms of CPU per request on a contended 2-core machine (91 tasks/s with 2,000
#: in flight): a round takes minutes, so it runs only when asked for.
CLIENTS = ["sleep", "keepalive", "socket"] + (
    ["httpx"] if os.environ.get("TASKFUSE_BENCH_ASYNC_HTTPX") else [])
#: httpx's connection pool scans its connections at every request (quadratic in them), so
#: 4,000 connections in one client cost more CPU than the rest of the task: the tasks share
#: SHARDS clients of about 8 connections each, picked by task id, on both sides alike.
SHARDS = 500


class Clients:
    """The tasks' HTTP clients, made before a round (bound to the loop that first uses
    them: the runner's)."""

    url = ""
    aio: ClassVar[list[httpx.AsyncClient]] = []
    sync: ClassVar[list[httpx.Client]] = []

    @classmethod
    def port(cls) -> int:
        return int(cls.url.rsplit(":", 1)[1])

    @classmethod
    def fresh(cls, executor: str, kind: str) -> None:
        """Fresh pools for a round; httpx's clients only for its rounds (`call`): 500 of
        them cost seconds to build and would only be thrown away."""
        KeepAlive.fresh()
        SyncKeepAlive.fresh()
        if kind != "call":
            cls.aio, cls.sync = [], []
            return
        tls = ssl.create_default_context()  # one (plain http): a context each costs ~30 ms
        if executor == "async":
            cls.aio = [httpx.AsyncClient(timeout=30, verify=tls) for _ in range(SHARDS)]
        else:
            cls.sync = [httpx.Client(timeout=30, verify=tls) for _ in range(SHARDS)]


_REQUEST = f"GET /sleep/{CALL_S} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


def _shard(task_id: str) -> int:
    return int(task_id[:8], 16) % SHARDS


def make_app(executor: str) -> App:
    """An app of one executor's kinds only: a claim of an app with both kinds cannot choose
    which it brings, and either side would hold some of the other's share."""
    limits = Limits.model_validate({"async_concurrency": IN_FLIGHT, "task_timeout_s": 120})
    app = App.from_limits(limits, f"bench-{executor}")
    if executor == "async":

        @app.task("call")
        async def call_async(ctx: Any, payload: Any) -> int:
            client = Clients.aio[_shard(ctx.task_id)]
            response = await client.get(f"{Clients.url}/sleep/{CALL_S}")
            return response.status_code

        @app.task("wait")
        async def wait_async(ctx: Any, payload: Any) -> None:
            await asyncio.sleep(CALL_S)

        @app.task("raw")
        async def raw_async(ctx: Any, payload: Any) -> int:
            reader, writer = await asyncio.open_connection("127.0.0.1", Clients.port())
            writer.write(_REQUEST)
            head = await reader.readuntil(b"\r\n\r\n")
            writer.close()
            return int(head.split(b" ", 2)[1])

        @app.task("kcall")
        async def kcall_async(ctx: Any, payload: Any) -> int:
            return await KeepAlive.call()

        @app.task("noop")
        async def noop_async(ctx: Any, payload: Any) -> None:
            return None

    else:

        @app.task("call")
        def call_thread(ctx: Any, payload: Any) -> int:
            client = Clients.sync[_shard(ctx.task_id)]
            return client.get(f"{Clients.url}/sleep/{CALL_S}").status_code

        @app.task("wait")
        def wait_thread(ctx: Any, payload: Any) -> None:
            time.sleep(CALL_S)

        @app.task("raw")
        def raw_thread(ctx: Any, payload: Any) -> int:
            with socket.create_connection(("127.0.0.1", Clients.port())) as sock:
                sock.sendall(_REQUEST)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += sock.recv(4096)
            return int(head.split(b" ", 2)[1])

        @app.task("kcall")
        def kcall_thread(ctx: Any, payload: Any) -> int:
            return SyncKeepAlive.call()

        @app.task("noop")
        def noop_thread(ctx: Any, payload: Any) -> None:
            return None

    return app


APPS = {"async": make_app("async"), "thread": make_app("thread")}


@pytest.fixture(scope="module")
def server() -> Any:
    with aioserver_process() as url:
        Clients.url = url
        KeepAlive.port = SyncKeepAlive.port = Clients.port()
        KeepAlive.request = SyncKeepAlive.request = request(CALL_S)
        yield url


class Rig:
    """One store per round; a round submits `n` tasks of `kind` to a started runner and
    waits for the last commit (module doc)."""

    def __init__(self, store_kind: str, executor: str, kind: str, n: int, workers: int,
                 warm: int = 0) -> None:
        self.store_kind, self.kind, self.n, self.workers = store_kind, kind, n, workers
        self.warm = warm  # keep-alive connections opened before each round (untimed)
        self.app, self.executor = APPS[executor], executor
        self.tmp = tempfile.mkdtemp(prefix="bench-async-")
        self.schema = ""
        self.runner: Runner | None = None
        self.cpu: list[float] = []
        self.steady: list[float] = []  # ends per second in each round's steady part
        self.heap = contextlib.ExitStack()

    def fresh(self) -> None:
        self.close()
        Clients.fresh(self.executor, self.kind)
        if self.store_kind == "memory":
            store: Any = MemoryStore()
        else:
            from taskfuse.store import open_store

            if self.store_kind == "sqlite":
                url = f"sqlite:///{os.path.join(self.tmp, uuid.uuid4().hex)}.db"
            else:
                self.schema = f"bench_{uuid.uuid4().hex[:12]}"
                url = f"{PG_URL}?schema={self.schema}"
            store = open_store(url)
        self.runner = Runner(self.app, store, workers=self.workers, heartbeat_s=10.0).start()
        assert self.runner.wait_settled(120)
        if self.warm and self.executor == "async":
            assert self.runner.aio is not None
            KeepAlive.current.warm_on(self.runner.aio.loop, self.warm)
        elif self.warm:
            SyncKeepAlive.warm(self.warm)
        if HEAP == "worker":  # as `taskfuse worker` runs its process (taskfuse.tuning)
            self.heap.enter_context(worker_heap())

    def drain(self) -> None:
        runner = self.runner
        assert runner is not None
        cpu = time.process_time()
        mine = time.thread_time()
        spec = self.app.spec(self.kind)
        for at in range(0, self.n, _CHUNK):
            runner.submit_many([spec] * min(_CHUNK, self.n - at))
        mine = time.thread_time() - mine
        assert runner.join(600)
        self.cpu.append(time.process_time() - cpu - mine)
        assert runner.stats.completed == self.n and runner.stats.failed == 0

    def read_steady(self) -> None:
        """The round's steady rate, read from the store after the timed part."""
        if self.runner is not None and self.kind != "noop":
            rate = steady_rate(self.runner.store.all_tasks(), CALL_S)
            if rate is not None:
                self.steady.append(rate)

    def close(self) -> None:
        self.heap.close()
        pool = getattr(KeepAlive, "current", None)
        if pool is not None:  # on the runner's loop, while it runs
            pool.close_from_outside()
        SyncKeepAlive.close()
        if self.runner is not None:
            self.runner.shutdown(5.0)
            close = getattr(self.runner.store, "close", None)
            if close is not None:
                close()
            self.runner = None
        if self.schema:
            _drop_schema(self.schema)
            self.schema = ""


class BareLoop:
    """No queue at all: the same N keep-alive calls on one asyncio loop, IN_FLIGHT at once
    (`bare_calls`): the floor this client and server leave on this machine."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cpu: list[float] = []
        self.steady: list[float] = []

    def fresh(self) -> None:
        self.close()
        self.loop = asyncio.new_event_loop()
        pool = KeepAlive.fresh()
        if WARM:
            self.loop.run_until_complete(pool.warm(IN_FLIGHT))

    def drain(self) -> None:
        assert self.loop is not None
        cpu = time.process_time()
        self.loop.run_until_complete(bare_calls(self.n, IN_FLIGHT))
        self.cpu.append(time.process_time() - cpu)
        assert KeepAlive.current.calls == self.n

    def read_steady(self) -> None:
        return None

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(KeepAlive.current.aclose())
            self.loop.close()
            self.loop = None


#: The bare loop's rate in this run, read by the keep-alive rounds (`pct_of_bare`).
BARE: dict[str, float] = {}


def steady_rate(tasks: list[Any], call_s: float) -> float | None:
    """Ends per second from one call's length after the last submission to one before the
    last end (module doc); None when the round is too short to have such a part."""
    lo = max(t.created_at for t in tasks) + call_s
    ends = [t.finished_at for t in tasks]
    hi = max(ends) - call_s
    if hi - lo < call_s:
        return None
    return sum(lo <= end < hi for end in ends) / (hi - lo)


def measure(benchmark: Any, rig: Rig | BareLoop, ideal: float | None = None) -> None:
    try:
        benchmark.pedantic(rig.drain, setup=rig.fresh, rounds=1, iterations=1)
        rig.read_steady()
    finally:
        rig.close()
    median = benchmark.stats.stats.median
    rate = rig.n / median
    benchmark.extra_info["tasks_per_s"] = round(rate)
    benchmark.extra_info["cpu_ms_per_task"] = round(1000 * min(rig.cpu) / rig.n, 4)
    if ideal is not None:
        benchmark.extra_info["ideal_per_s"] = round(ideal)
        benchmark.extra_info["pct_of_ideal"] = round(100 * rate / ideal, 1)
        if rig.steady:
            steady = sorted(rig.steady)[len(rig.steady) // 2]
            benchmark.extra_info["steady_per_s"] = round(steady)
            benchmark.extra_info["steady_pct_of_ideal"] = round(100 * steady / ideal, 1)


def test_bare_loop(benchmark, server) -> None:
    """The keep-alive calls with no queue: what the runtimes' keep-alive rounds read against."""
    benchmark.group = (f"async: {N} tasks x one {CALL_S:g}s call (keepalive), {IN_FLIGHT} in "
                       f"flight, no queue{', warm' if WARM else ''}")
    measure(benchmark, BareLoop(N), IN_FLIGHT / CALL_S)
    BARE["rate"] = benchmark.extra_info["tasks_per_s"]


@pytest.mark.parametrize("executor", ["async", "thread"])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
def test_calls_in_flight(benchmark, server, store: str, client: str, executor: str) -> None:
    _need(store)
    benchmark.group = (f"async: {N} tasks x one {CALL_S:g}s call ({client}), {IN_FLIGHT} in "
                       f"flight ({store})")
    workers = 4 if executor == "async" else IN_FLIGHT
    kind = {"sleep": "wait", "httpx": "call", "socket": "raw", "keepalive": "kcall"}[client]
    warm = IN_FLIGHT if WARM and client == "keepalive" else 0
    measure(benchmark, Rig(store, executor, kind, N, workers, warm), IN_FLIGHT / CALL_S)
    if client == "keepalive" and "rate" in BARE:
        benchmark.extra_info["pct_of_bare"] = round(
            100 * benchmark.extra_info["tasks_per_s"] / BARE["rate"], 1)


@pytest.mark.parametrize("executor", ["async", "thread"])
@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
def test_noop(benchmark, store: str, executor: str) -> None:
    _need(store)
    benchmark.group = f"async: {N_NOOP} no-op tasks ({store})"
    measure(benchmark, Rig(store, executor, "noop", N_NOOP, NOOP_WORKERS))
