"""The async executor end to end: `async def` tasks on the worker's event loop, calling an
asyncio HTTP server on 127.0.0.1 over real sockets, on memory, SQLite and PostgreSQL.

Waits are on readiness signals (the server saw the request, a coroutine began), never on a
guess; the only real-time bounds are the tasks' own timeouts, whose end is deterministic
(a coroutine that awaits forever ends TIMEOUT, however busy the machine is).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskfuse.core.events import Event
from taskfuse.core.states import TaskStatus
from taskfuse.limits.schema import Limits
from taskfuse.observe.prometheus import GuardCollector
from taskfuse.runtime import App
from taskfuse.runtime.errors import RuntimeConfigError
from tests.runtime.aioserver import AioServer, aioserver
from tests.runtime.conftest import JOIN_S
from tests.store.backends import ALL_STORES


@pytest.fixture
def server() -> Any:
    with aioserver() as s:
        yield s


@pytest.fixture(params=sorted(ALL_STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A store of each kind, closed at the end. A test names it before `make_runner`, so its
    runners stop first: closed under a runner's claimer, a SQLite connection crashed the
    interpreter (a segmentation fault in the claim, seen once in a full run)."""
    with ALL_STORES[request.param](tmp_path) as s:
        yield s


class Http:
    """One httpx.AsyncClient, made on the loop that first uses it (the runner's)."""

    def __init__(self, server: AioServer) -> None:
        self.base = server.url
        self.client: httpx.AsyncClient | None = None

    async def get(self, path: str, timeout: float | None = None) -> int:
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=None)
        response = await self.client.get(self.base + path, timeout=timeout)
        response.raise_for_status()
        return response.status_code


class Gauge:
    """How many are inside at once, and the most ever (coroutines on one loop: no lock)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def __enter__(self) -> Gauge:
        self.now += 1
        self.most = max(self.most, self.now)
        return self

    def __exit__(self, *exc: object) -> None:
        self.now -= 1


def _until(check: Any, what: str) -> None:
    end = time.monotonic() + JOIN_S
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_async_tasks_call_a_real_server_through_the_downstreams_policy(
        store, make_runner, server) -> None:
    app = App("aio", seed=1)
    app.downstream("partner", bulkhead=3, timeout_s=5.0, retry={"max_retry": 2})
    http, calls = Http(server), Gauge()
    failed_once: set[int] = set()

    async def fetch(sku: int, timeout: float | None = None) -> int:
        path = "/sleep/0.02"
        if sku % 4 == 0 and sku not in failed_once:
            failed_once.add(sku)  # the partner's first answer is a 503: the call retries
            path = "/status/503"
        with calls:
            return await http.get(path, timeout)

    @app.task("sync_sku", downstreams=("partner",))
    async def sync_sku(ctx, payload):
        return await ctx.downstream("partner").call(fetch, payload)

    assert app.definition("sync_sku").executor == "async"
    threads_before = threading.active_count()
    runner = make_runner(app, store, workers=2)
    tasks = [runner.submit("sync_sku", i) for i in range(20)]
    assert runner.join(JOIN_S)
    for task in tasks:
        final = runner.get(task.task_id)
        assert (final.status, final.result, final.retry_count) == (TaskStatus.SUCCESS, 200, 0)
    assert calls.most <= 3  # the bulkhead held across coroutines
    assert runner.clients["partner"].retries == 5  # one per 503: the call's own retries
    assert server.requests == 25
    # the loop and its lag watcher are the only threads the executor adds
    assert threading.active_count() <= threads_before + 2 + 2 + 6


def _awaits_forever(server: AioServer) -> tuple[App, list[str]]:
    """An app whose kind `wait` awaits a request the server never answers, and the ids of
    the coroutines that saw CancelledError."""
    app = App("aio")
    http = Http(server)
    saw: list[str] = []

    @app.task("wait")
    async def wait(ctx, payload):
        try:
            return await http.get("/hang")
        except asyncio.CancelledError:
            saw.append(ctx.task_id)
            raise

    return app, saw


def test_the_heartbeat_renews_a_coroutines_lease_and_brings_a_cancel_from_elsewhere(
        make_runner, tmp_path, server) -> None:
    """The lease of an attempt on the loop is renewed like a thread's, and a cancel made by
    another process (here: another Scheduler on the same SQLite file) reaches the coroutine
    through the heartbeat, which cancels it; `ctx.cancelled()` never reads the store."""
    from taskfuse.core.scheduler import Scheduler
    from taskfuse.store.sqlite import SQLiteStore

    path = tmp_path / "tasks.db"
    app, saw = _awaits_forever(server)
    runner = make_runner(app, SQLiteStore(path), workers=1, heartbeat_s=0.05)
    task = runner.submit("wait")
    assert server.arrived.wait(JOIN_S)
    first = runner.get(task.task_id).heartbeat_at
    _until(lambda: runner.get(task.task_id).heartbeat_at > first, "a lease renewal")
    other = SQLiteStore(path)
    try:
        assert Scheduler(other).cancel(task.task_id, time.time(), "operator") is not None
    finally:
        other.close()
    _until(lambda: saw == [task.task_id], "the heartbeat to cancel the coroutine")
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.CANCELED


def test_cancel_mid_await_cancels_the_coroutine(store, make_runner, server) -> None:
    app, saw = _awaits_forever(server)

    runner = make_runner(app, store, workers=1)
    task = runner.submit("wait")
    assert server.arrived.wait(JOIN_S)  # the coroutine is inside its await now
    runner.cancel(task.task_id)
    assert runner.join(JOIN_S)
    assert runner.get(task.task_id).status is TaskStatus.CANCELED
    _until(lambda: saw == [task.task_id], "the coroutine to see CancelledError")
    _until(lambda: runner.loop_room.held == 0, "the slot to be free")


def test_a_coroutine_that_awaits_forever_times_out_and_frees_its_slot(
        store, make_runner) -> None:
    limits = Limits.model_validate({"kinds": {"k": {"executor": "async",
                                                    "async_concurrency": 1}}})
    app = App.from_limits(limits, "aio")
    ran: list[str] = []

    @app.task("k")
    async def k(ctx, payload):
        ran.append(payload)
        if payload == "hang":
            await asyncio.Event().wait()
        return payload

    runner = make_runner(app, store, workers=1)
    hung = runner.submit("k", "hang", timeout=1.0, max_retry=0)
    _until(lambda: ran == ["hang"], "the hanging coroutine to start")
    quick = runner.submit("k", "quick")  # the kind's only slot is the hung one's
    assert runner.join(JOIN_S)
    assert runner.get(hung.task_id).status is TaskStatus.TIMEOUT
    assert runner.get(quick.task_id).status is TaskStatus.SUCCESS
    assert ran == ["hang", "quick"]
    assert runner.stats.discarded == 1  # the canceled coroutine's report lost the race


def test_shutdown_cancels_coroutines_and_hands_them_back(store, make_runner, server) -> None:
    app, saw = _awaits_forever(server)

    runner = make_runner(app, store, workers=1)
    tasks = [runner.submit("wait") for _ in range(3)]
    _until(lambda: server.hung == 3, "three coroutines inside their await")
    released = runner.shutdown(grace_s=0.2)
    assert sorted(t.task_id for t in released) == sorted(t.task_id for t in tasks)
    for task in tasks:
        final = runner.get(task.task_id)
        assert final.status is TaskStatus.PENDING
        assert final.retry_count == 0 and final.worker_id is None  # a release is no attempt
    assert sorted(saw) == sorted(t.task_id for t in tasks)
    assert runner.stats.released == 3 and runner.attempts.aio == {}


def test_a_task_that_blocks_the_loop_shows_in_the_lag_and_is_named(
        make_runner, caplog) -> None:
    app = App("aio")
    events: list[Event] = []

    @app.task("blocks")
    async def blocks(ctx, payload):
        time.sleep(0.6)  # a sync call on the loop: every coroutine waits for it
        return None

    runner = make_runner(app, sinks=[events.append], workers=1)
    with caplog.at_level(logging.WARNING, logger="taskfuse.runtime"):
        task = runner.submit("blocks")
        assert runner.join(JOIN_S)
        _until(lambda: runner.loop_lag()[1] >= 0.3, "the lag to be measured")
    named = [r for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert named and f"blocks:{task.task_id}" in named[0].getMessage()
    lags = [e for e in events if e.reason == "loop_lag"]
    assert lags and max(e.value for e in lags) >= 0.3 and lags[0].subject == "event_loop"
    gauges = {m.name: m.samples[0].value for m in GuardCollector(runner).collect()
              if m.name.startswith("taskfuse_worker_loop_lag")}
    assert gauges["taskfuse_worker_loop_lag_max_seconds"] >= 0.3


def test_a_workers_trace_samples_the_loop_lag(make_runner, tmp_path) -> None:
    """The trace of a real async run has the `loop_lag` series (the largest lag since the
    previous sample), which the shipped loop-lag rule reads; a thread-only run has none."""
    from taskfuse.observe.alerts import Recording
    from taskfuse.trace import read_trace

    app = App("aio")

    @app.task("blocks")
    async def blocks(ctx, payload):
        time.sleep(0.6)  # a sync call on the loop: a ping waits at least 0.35 s
        return None

    path = tmp_path / "aio.trace"
    runner = make_runner(app, workers=1, trace=path, trace_interval_s=0.05)
    runner.submit("blocks")
    assert runner.join(JOIN_S)
    _until(lambda: runner.loop_lag()[1] >= 0.3, "the lag to be measured")
    runner.shutdown()
    _, lags = read_trace(path).series("loop_lag")
    assert max(lags) >= 0.3
    assert max(s.loop_lag for s in Recording.from_trace(path).samples) >= 0.3

    plain = App("threads")
    plain.task("t")(lambda ctx, payload: None)
    other = make_runner(plain, workers=1, trace=tmp_path / "t.trace", trace_interval_s=0.05)
    other.submit("t")
    assert other.join(JOIN_S)
    other.shutdown()
    assert "loop_lag" not in read_trace(tmp_path / "t.trace").series_names


def test_the_kind_cap_bounds_coroutines_in_flight(store, make_runner, server) -> None:
    limits = Limits.model_validate({"async_concurrency": 50,
                                    "kinds": {"k": {"executor": "async",
                                                    "async_concurrency": 3}}})
    app = App.from_limits(limits, "aio")
    http, inside = Http(server), Gauge()

    @app.task("k")
    async def k(ctx, payload):
        with inside:
            return await http.get("/sleep/0.05")

    runner = make_runner(app, store, workers=1)
    tasks = [runner.submit("k", i) for i in range(12)]
    assert runner.join(JOIN_S)
    assert all(runner.get(t.task_id).status is TaskStatus.SUCCESS for t in tasks)
    assert 1 <= inside.most <= 3
    assert runner.loop_room.held == 0


def test_pools_logger_and_cancelled_inside_a_coroutine(make_runner, caplog) -> None:
    app = App("aio")
    app.pool("db", size=1)
    inside = Gauge()
    seen: list[bool] = []

    @app.task("k")
    async def k(ctx, payload):
        async with ctx.pool("db"):
            with inside:
                await asyncio.sleep(0.01)
        seen.append(ctx.cancelled())
        ctx.logger.info("done %s", payload)

    runner = make_runner(app, workers=1)
    with caplog.at_level(logging.INFO, logger="taskfuse.task.k"):
        tasks = [runner.submit("k", i) for i in range(5)]
        assert runner.join(JOIN_S)
    assert inside.most == 1 and seen == [False] * 5
    traced = {r.trace_id for r in caplog.records if r.name == "taskfuse.task.k"}
    assert traced == {t.trace_id for t in tasks}


def test_mixed_thread_and_async_kinds_share_one_runner(store, make_runner) -> None:
    app = App("aio")

    @app.task("t")
    def t(ctx, payload):
        return threading.current_thread().name

    @app.task("a")
    async def a(ctx, payload):
        return threading.current_thread().name

    runner = make_runner(app, store, workers=2)
    threads = [runner.submit("t") for _ in range(5)]
    coros = [runner.submit("a") for _ in range(5)]
    assert runner.join(JOIN_S)
    assert {runner.get(x.task_id).result for x in coros} == {"taskfuse-event-loop"}
    assert all(runner.get(x.task_id).result.startswith("taskfuse-worker-") for x in threads)


def test_executor_placements_that_cannot_run_are_refused() -> None:
    async def coro(ctx, payload):
        return None

    def plain(ctx, payload):
        return None

    with pytest.raises(RuntimeConfigError, match="is an async def"):
        App().task("k", executor="thread")(coro)
    with pytest.raises(RuntimeConfigError, match="is a plain function"):
        App().task("k", executor="async")(plain)
    app = App.from_limits(Limits.model_validate({"kinds": {"k": {"executor": "async"}}}))
    app.task("k")(plain)
    with pytest.raises(RuntimeConfigError, match="is a plain function"):
        app.definition("k")


def test_a_coroutine_that_swallows_its_cancel_is_stuck_and_its_slot_replaced(
        make_runner) -> None:
    """A coroutine that catches CancelledError and keeps running ends TIMEOUT at its
    timeout, counts as a stuck coroutine (stuck_threads, the metrics) and gives its slot
    back up to the stuck bound (1 here): the next task runs on the loop's only slot. A
    second one past the bound keeps its slot; when both let go, the room is whole again."""
    limits = Limits.model_validate({"async_concurrency": 1, "stuck_threads_max": 1,
                                    "kinds": {"k": {"executor": "async"}}})
    app = App.from_limits(limits, "aio")
    let_go, swallowed = threading.Event(), threading.Event()

    @app.task("k")
    async def k(ctx, payload):
        while payload == "deaf" and not let_go.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                swallowed.set()  # and keeps running: the slot is never handed back
        return payload

    runner = make_runner(app, workers=1, stuck_after_s=0.1)
    room = runner.loop_room

    def stuck() -> list[dict[str, Any]]:
        return runner.stuck_threads()

    deaf = runner.submit("k", "deaf", timeout=0.3, max_retry=0)
    _until(lambda: runner.get(deaf.task_id).status is TaskStatus.TIMEOUT, "the timeout")
    _until(lambda: len(stuck()) == 1, "the coroutine to count as stuck")
    assert swallowed.is_set()
    [entry] = stuck()
    assert entry["coroutine"] and entry["replaced"] and entry["kind"] == "k"
    assert entry["task_id"] == deaf.task_id
    gauges = {m.name: m.samples[0].value for m in GuardCollector(runner).collect()
              if m.name in ("taskfuse_worker_stuck_coroutines", "taskfuse_worker_stuck_threads")}
    assert gauges == {"taskfuse_worker_stuck_coroutines": 1, "taskfuse_worker_stuck_threads": 0}

    quick = runner.submit("k", "quick")  # the only slot was the deaf one's: replaced
    assert runner.join(JOIN_S)
    assert runner.get(quick.task_id).status is TaskStatus.SUCCESS
    assert runner.stats.replaced == 1

    second = runner.submit("k", "deaf", timeout=0.3, max_retry=0)
    _until(lambda: len(stuck()) == 2, "the second to count as stuck")
    assert runner.get(second.task_id).status is TaskStatus.TIMEOUT
    assert [e["replaced"] for e in stuck() if e["task_id"] == second.task_id] == [False]
    with runner.attempts.mu:
        assert room.free() == 0  # past the bound: its slot stays taken

    let_go.set()
    _until(lambda: not stuck() and not runner.attempts.aio, "both to end")
    # Off the loop is not yet written: the completer's next group tells the late ones apart.
    _until(lambda: not runner.attempts.committing, "their late outcomes written")
    with runner.attempts.mu:
        assert room.free() == 1 and room.held == 0 and runner.attempts.stopped == {}
    assert runner.get(deaf.task_id).status is TaskStatus.TIMEOUT  # a late result changes nothing
    assert runner.stats.discarded == 2
