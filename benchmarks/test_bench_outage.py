"""Recovery after a PostgreSQL outage: seconds from "the database answers again" to "work
resumes", for outages of several lengths, with the store's pool beside psycopg_pool's own.

A private cluster (tests/runtime/pgcluster.py: initdb on a free port; the shared server is
never touched) is stopped with a fast shutdown while a 4-thread runner is idle on it, held
down for the outage, and started again (pg_ctl -w: it accepts connections). Then a task is
submitted from a fresh connection, and the benchmark times until that task has run (its
function began) and until its outcome is committed. "taskfuse" is the store as shipped
(the pool reconnects at least every 0.5 s: a 0.5 s `reconnect_timeout`
whose `reconnect_failed` starts the next attempt); "stock" is the same store on a
plain psycopg_pool ConnectionPool (reconnects after 1, 2, 4, 8 ... s). One round per
length and pool: the outage itself is the cost, so keep the list short.

    .venv/bin/python -m pytest benchmarks/test_bench_outage.py --benchmark-only -s
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from taskfuse.runtime import App, Runner
from taskfuse.store import postgres
from taskfuse.store.postgres import PostgresStore
from tests.runtime.pgcluster import PrivateCluster, private_cluster

OUTAGES_S = (10.0, 20.0, 30.0, 40.0, 60.0)
POOLS = ("taskfuse", "stock")
RESULTS: dict[tuple[str, float], tuple[float, float]] = {}


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    try:
        cm = private_cluster()
        pg = cm.__enter__()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot start a private PostgreSQL cluster: {exc}")
    try:
        yield pg
    finally:
        cm.__exit__(None, None, None)
        _print_table()


@pytest.mark.parametrize("outage_s", OUTAGES_S)
@pytest.mark.parametrize("pool", POOLS)
def test_seconds_from_database_back_to_work_resumed(benchmark: Any, cluster: PrivateCluster,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    pool: str, outage_s: float) -> None:
    if pool == "stock":
        monkeypatch.setattr(postgres, "_pool",
                            lambda conninfo, **kwargs: ConnectionPool(conninfo, **kwargs))
    schema = f"outage_{pool}_{int(outage_s)}"
    ran = threading.Event()
    app = App("outage-bench")

    @app.task("noop", timeout=600)
    def noop(ctx: Any, payload: Any) -> Any:
        ran.set()
        return payload

    store = PostgresStore(f"{cluster.url}?schema={schema}&retry_for=600")
    runner = Runner(app, store, workers=4).start()
    try:
        runner.submit_many([runner.spec("noop", i) for i in range(20)])
        assert runner.join(60)

        def outage() -> tuple[tuple[()], dict[str, Any]]:
            cluster.stop()
            time.sleep(outage_s)
            cluster.start()  # returns once the server accepts connections
            ran.clear()
            return (), {}

        def resume() -> float:
            began = time.monotonic()
            feeder = PostgresStore(f"{cluster.url}?schema={schema}")
            app.scheduler(feeder).submit(app.spec("noop", "after"), time.time())
            feeder.close()
            assert ran.wait(600)
            first_run = time.monotonic() - began
            assert runner.join(600)
            return first_run

        first_run = benchmark.pedantic(resume, setup=outage, rounds=1, iterations=1)
        committed = benchmark.stats.stats.median
        benchmark.extra_info.update(outage_s=outage_s, pool=pool, first_run_s=first_run)
        RESULTS[(pool, outage_s)] = (first_run, committed)
    finally:
        runner.shutdown(grace_s=5)
        store.close()


def _print_table() -> None:
    if not RESULTS:
        return
    print("\noutage s | pool      | task ran after s | committed after s")
    for (pool, outage), (ran_s, committed) in sorted(RESULTS.items(), key=lambda r: r[0][::-1]):
        print(f"{outage:8.0f} | {pool:9} | {ran_s:16.2f} | {committed:17.2f}")
