"""Real DB connection pools: SQLite by default, PostgreSQL (psycopg_pool) with --store.

A query step draws its duration d from the scenario and holds a real connection for d: on
SQLite it runs a real query, then keeps the connection until d has passed (the pool's
behaviour, not the query planner, is what the scenario is about); on PostgreSQL it runs
`SELECT pg_sleep(d)`, so the server holds the backend for exactly that long.

What the pool answers a caller is the simulator's: a connection, `pool_timeout` after
`acquire_timeout_s` of waiting, or `db_unavailable` inside an outage window. The queue is
the runtime's own: a pool section (`taskfuse.runtime.pools`, sized by the scenario's pool)
that tasks enter with `ctx.pool(name)` and business requests with a permit of the same
section, one FIFO line for both (a freed turn goes straight to the oldest waiter); holding
a turn, a caller always finds a free connection.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lab.model.pool import DB_UNAVAILABLE, POOL_TIMEOUT
from lab.scenario import Pool as PoolSpec
from taskfuse.runtime import PoolSection, TaskError
from taskfuse.store import describe_error, redact_url

#: URL parameters that configure the taskfuse store, not libpq: dropped for the pools.
_STORE_PARAMS = ("schema", "pool_min", "pool_max", "retry_for")


class PoolError(Exception):
    """A connection could not be had: `kind` is pool_timeout or db_unavailable."""

    def __init__(self, kind: str, message: str = "") -> None:
        self.kind = kind
        super().__init__(message or kind)


class Clock(Protocol):
    def now(self) -> float: ...  # scenario seconds since the start
    def elapsed(self) -> float: ...  # real seconds since the start
    def scenario(self, real_seconds: float) -> float: ...


class PoolStats:
    """What the report asks of a pool; waits are in scenario seconds."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0
        self.max_in_use = 0
        self.waits: list[float] = []
        self.timeouts = 0
        self.refused = 0
        self.lock = threading.Lock()

    def granted(self, waited: float) -> None:
        with self.lock:
            self.waits.append(waited)
            self.in_use += 1
            self.max_in_use = max(self.max_in_use, self.in_use)

    def released(self) -> None:
        with self.lock:
            self.in_use -= 1


class Turn(Protocol):
    """A turn of a pool section: a task's `ctx.pool(name)`, or a section's own permit."""

    def acquire(self) -> object: ...  # raises TaskError(pool_timeout), or TaskCanceled
    def release(self) -> None: ...


class AsyncTurn(Protocol):
    """A coroutine's turn: `ctx.pool(name)` of an async task (`async with`)."""

    async def __aenter__(self) -> object: ...  # raises TaskError(pool_timeout)
    def release(self) -> None: ...


class RealPool:
    """Acquire / query / release with the scenario's acquire timeout and outage windows."""

    def __init__(self, name: str, spec: PoolSpec, clock: Clock) -> None:
        self.name = name
        self.spec = spec
        self.clock = clock
        self.stats = PoolStats(spec.size)
        self.closed = threading.Event()
        self.section = PoolSection(name, spec.size, spec.acquire_timeout_s)
        self._turns: dict[int, Turn | AsyncTurn] = {}  # id(conn) -> the turn it was taken with
        self._turns_lock = threading.Lock()

    def attach(self, section: PoolSection) -> None:
        """Queue in the runtime's section of this pool (before any use), so tasks and
        business requests wait in one FIFO line, as they do in the simulated pool."""
        self.section = section

    def down(self) -> bool:
        now = self.clock.elapsed()
        return any(w.start_s <= now < w.end_s for w in self.spec.outages)

    def acquire(self, turn: Turn | None = None) -> Any:
        """A connection after a turn (`turn`, else a permit of the section's own), or
        PoolError(db_unavailable | pool_timeout)."""
        self._refuse_if_down()
        turn = turn if turn is not None else self.section.permit()
        began = time.monotonic()
        try:
            turn.acquire()
        except TaskError as exc:
            raise self._refused(exc) from None
        return self._granted(turn, began)

    async def aacquire(self, turn: AsyncTurn) -> Any:
        """`acquire` in a coroutine: the turn (`async with ctx.pool(name)`) awaited."""
        self._refuse_if_down()
        began = time.monotonic()
        try:
            await turn.__aenter__()
        except TaskError as exc:
            raise self._refused(exc) from None
        return self._granted(turn, began)

    def _refuse_if_down(self) -> None:
        if self.down():
            with self.stats.lock:
                self.stats.refused += 1
            raise PoolError(DB_UNAVAILABLE, f"database of pool {self.name!r} is down")

    def _refused(self, exc: TaskError) -> BaseException:
        """What a turn's refusal becomes: a pool_timeout (counted), or the task's stop."""
        if exc.kind != POOL_TIMEOUT:
            return exc  # the task was told to stop while it waited
        if not self.closed.is_set():  # a refusal at shutdown is not a timeout
            with self.stats.lock:
                self.stats.timeouts += 1
        return PoolError(POOL_TIMEOUT, f"no connection from pool {self.name!r} within "
                                       f"{self.spec.acquire_timeout_s:g} s")

    def _granted(self, turn: Turn | AsyncTurn, began: float) -> Any:
        """A connection for the turn just had (given back if none can be taken)."""
        try:
            conn = self._take()
        except BaseException:
            turn.release()
            raise
        with self._turns_lock:
            self._turns[id(conn)] = turn
        self.stats.granted(self.clock.scenario(time.monotonic() - began))
        return conn

    def release(self, conn: Any) -> None:
        """Give the connection back, then the turn it was taken with."""
        self.stats.released()
        with self._turns_lock:
            turn = self._turns.pop(id(conn))
        self._put(conn)
        turn.release()

    def hold(self, conn: Any, seconds: float, pause: Callable[[float], object]) -> None:
        """Run a real query and keep the connection busy for `seconds` in all."""
        raise NotImplementedError

    async def ahold(self, conn: Any, seconds: float,
                    pause: Callable[[float], Awaitable[object]]) -> None:
        """`hold` in a coroutine: a short real query, then the rest of `seconds` awaited (the
        pool's occupancy, not the query, is what the scenario is about)."""
        began = time.monotonic()
        self._ping(conn)
        await pause(max(0.0, seconds - (time.monotonic() - began)))

    def _ping(self, conn: Any) -> None:
        """A short real query on `conn`."""
        raise NotImplementedError

    def _take(self) -> Any:
        """A free connection (a turn is held, so there is one)."""
        raise NotImplementedError

    def _put(self, conn: Any) -> None:
        raise NotImplementedError

    def interrupt(self) -> None:
        """Stop handing out connections: current and later waits fail at once (shutdown)."""
        self.closed.set()
        self.section.close()

    def close(self) -> None:
        self.closed.set()

    @property
    def in_use(self) -> int:
        return self.stats.in_use

    @property
    def waiting(self) -> int:
        return self.section.waiting


class SQLitePool(RealPool):
    """N sqlite3 connections to one file; the section's FIFO decides who gets one."""

    def __init__(self, name: str, spec: PoolSpec, clock: Clock, path: Path) -> None:
        super().__init__(name, spec, clock)
        _prepare(path)
        self._all = [sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                     for _ in range(spec.size)]
        self._free = list(self._all)
        self._lock = threading.Lock()

    def _take(self) -> Any:
        with self._lock:
            return self._free.pop()

    def _put(self, conn: Any) -> None:
        with self._lock:
            self._free.append(conn)

    def hold(self, conn: Any, seconds: float, pause: Callable[[float], object]) -> None:
        began = time.monotonic()
        self._ping(conn)
        pause(max(0.0, seconds - (time.monotonic() - began)))

    def _ping(self, conn: Any) -> None:
        conn.execute("SELECT count(*), max(v) FROM items WHERE k < ?", (64,)).fetchone()

    def close(self) -> None:
        super().close()
        with self._lock:
            for conn in self._all:
                conn.close()
            self._free.clear()


def _prepare(path: Path) -> None:
    """A small table to query (WAL, so readers on many connections never block)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS items (k INTEGER PRIMARY KEY, v REAL)")
        if conn.execute("SELECT count(*) FROM items").fetchone()[0] == 0:
            conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, i * 0.5) for i in range(256)])
        conn.commit()


class PostgresPool(RealPool):
    """psycopg_pool with min = max = the scenario's size; queries are `pg_sleep(d)`."""

    def __init__(self, name: str, spec: PoolSpec, clock: Clock, url: str) -> None:
        super().__init__(name, spec, clock)
        from psycopg_pool import ConnectionPool, PoolTimeout

        _check_reachable(name, url)  # one clear line, not a pool retrying in the logs
        self._pool = ConnectionPool(libpq_url(url), min_size=spec.size, max_size=spec.size,
                                    kwargs={"autocommit": True, "connect_timeout": 5},
                                    open=False, name=f"loadtest:{name}")
        try:
            self._pool.open(wait=True, timeout=10.0)
        except PoolTimeout:
            self._pool.close()
            raise PoolError(DB_UNAVAILABLE, f"pool {name!r}: no {spec.size} connections to "
                                            f"{redact_url(url)} within 10 s") from None

    def _take(self) -> Any:
        from psycopg_pool import PoolClosed, PoolTimeout, TooManyRequests

        try:  # a turn is held, so a connection is free: the timeout is only a net
            return self._pool.getconn(timeout=self.spec.acquire_timeout_s)
        except (PoolTimeout, TooManyRequests, PoolClosed):
            raise PoolError(POOL_TIMEOUT, f"pool {self.name!r} is closed") from None

    def _put(self, conn: Any) -> None:
        self._pool.putconn(conn)  # after interrupt() the closed pool closes it

    def interrupt(self) -> None:
        super().interrupt()
        self._pool.close(timeout=0.0)  # waiters get PoolClosed at once

    def hold(self, conn: Any, seconds: float, pause: Callable[[float], object]) -> None:
        conn.execute("SELECT pg_sleep(%s)", [seconds])

    def _ping(self, conn: Any) -> None:
        conn.execute("SELECT 1")  # a blocking round trip on the loop: a few hundred us

    def close(self) -> None:
        super().close()
        self._pool.close(timeout=2.0)  # a no-op when interrupt() closed it already


def _check_reachable(name: str, url: str) -> None:
    import psycopg

    try:
        psycopg.connect(libpq_url(url), connect_timeout=5).close()
    except psycopg.Error as exc:
        raise PoolError(DB_UNAVAILABLE, f"pool {name!r}: cannot connect to "
                                        f"{redact_url(url)}: {describe_error(exc, url)}") from None


def libpq_url(url: str) -> str:
    """A store URL without the taskfuse store's own parameters (libpq would refuse them)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in _STORE_PARAMS]
    return urlunsplit(parts._replace(query=urlencode(query)))


def open_pools(specs: dict[str, PoolSpec], clock: Clock, store_url: str | None,
               workdir: Path) -> dict[str, RealPool]:
    """One real pool per scenario pool: PostgreSQL when the store URL is one, else SQLite."""
    pools: dict[str, RealPool] = {}
    try:
        for name, spec in specs.items():
            if store_url is not None and urlsplit(store_url).scheme in ("postgresql", "postgres"):
                pools[name] = PostgresPool(name, spec, clock, store_url)
            else:
                pools[name] = SQLitePool(name, spec, clock, workdir / f"pool-{name}.db")
    except BaseException:
        for pool in pools.values():
            pool.close()
        raise
    return pools
