"""Worker processes for the fleet-limit tests (run under multiprocessing "spawn").

Each process runs a real Runner on PostgreSQL with the app below. Task functions report what
they do inside the downstream to a probe table in the test's schema, through their own
connection, so the test reads one truth for all processes:

* ``probe``: one row; `n` is how many calls are inside the downstream right now fleet-wide,
  `peak` the most there ever were (both updated atomically by the database);
* ``calls``: one row per call (who made it, when it entered).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from taskfuse.runtime import App, Runner
from taskfuse.store import open_store

_local = threading.local()
_config: dict[str, str] = {}


def make_app(bulkhead: int, lease_s: float = 30.0) -> App:
    """The app every process of a test runs: one fleet-scoped downstream, two task kinds."""
    app = App("fleet-test")
    app.downstream("partner", bulkhead=bulkhead, scope="fleet", lease_s=lease_s)
    app.task("call", timeout=60)(call)
    app.task("hog", timeout=60)(hog)
    return app


def create_probe(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.probe (n INT NOT NULL, peak INT NOT NULL)")
        conn.execute(f"INSERT INTO {schema}.probe VALUES (0, 0)")
        conn.execute(f"CREATE TABLE {schema}.calls (worker TEXT, kind TEXT, "
                     f"entered DOUBLE PRECISION)")


def configure(dsn: str, schema: str) -> None:
    """Where task functions of this process report (called once per process)."""
    _config.update(dsn=dsn, schema=schema, worker=str(os.getpid()))


def _conn() -> Any:
    conn = getattr(_local, "conn", None)
    if conn is None:
        import psycopg

        conn = _local.conn = psycopg.connect(_config["dsn"], autocommit=True)
    return conn


def _enter(kind: str) -> None:
    schema = _config["schema"]
    conn = _conn()
    conn.execute(f"UPDATE {schema}.probe SET n = n + 1, peak = greatest(peak, n + 1)")
    conn.execute(f"INSERT INTO {schema}.calls VALUES (%s, %s, %s)",
                 (_config["worker"], kind, time.time()))


def _exit() -> None:
    _conn().execute(f"UPDATE {_config['schema']}.probe SET n = n - 1")


def call(ctx: Any, payload: Any) -> None:
    """A short downstream call: counted in on entry, out before the permit is released."""
    with ctx.downstream("partner"):
        _enter("call")
        time.sleep(payload["hold_s"])
        _exit()


def hog(ctx: Any, payload: Any) -> None:
    """Enter the downstream and stay there (until the process is killed or stopped)."""
    with ctx.downstream("partner"):
        _enter("hog")
        ctx.sleep(payload["hold_s"])
        _exit()


def serve(store_url: str, dsn: str, schema: str, bulkhead: int, lease_s: float, workers: int,
          ready: Any, done: Any) -> None:
    """Run a Runner until `done` is set (or for a minute): one worker process of the fleet."""
    configure(dsn, schema)
    runner = Runner(make_app(bulkhead, lease_s), open_store(store_url), workers=workers)
    runner.start()
    ready.put(os.getpid())
    done.wait(60.0)
    runner.shutdown(grace_s=2.0)
    runner.store.close()  # type: ignore[attr-defined]
