"""The database goes away mid-run, longer than the store's own retries: nothing is lost, no
success is stored as a failure, work resumes promptly, and /metrics keeps answering.

A private PostgreSQL cluster (tests/runtime/pgcluster.py) is stopped with a fast shutdown
while four threads work through 200 tasks, held down for OUTAGE_S (three times the store's
retry_for), and started again.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.observe.prometheus import serve_runner
from taskfuse.runtime import App, Runner
from taskfuse.store.postgres import PostgresStore
from tests.runtime.pgcluster import private_cluster
from tests.store.backends import IN_CI

RETRY_FOR_S = 2.0
OUTAGE_S = 3 * RETRY_FOR_S
TASKS = 200


def _scrape(url: str) -> tuple[float, dict[str, float]]:
    began = time.monotonic()
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return time.monotonic() - began, values


@pytest.mark.slow
def test_an_outage_longer_than_retry_for_loses_nothing_and_resumes() -> None:
    try:
        cluster_cm = private_cluster()
        pg = cluster_cm.__enter__()
    except (RuntimeError, OSError) as exc:  # no server binaries on this machine
        if IN_CI:
            raise
        pytest.skip(f"cannot start a private PostgreSQL cluster: {exc}")
    effects: list[tuple[float, str]] = []
    lock = threading.Lock()
    app = App("outage")

    @app.task("work", timeout=30, max_retry=0)
    def work(ctx, payload):
        time.sleep(0.03)
        with lock:
            effects.append((time.monotonic(), ctx.task_id))  # the side effect happened
        return payload

    scrapes: list[tuple[float, float, dict[str, float]]] = []
    store = PostgresStore(f"{pg.url}?schema=tf&retry_for={RETRY_FOR_S}")
    try:
        runner = Runner(app, store, workers=4)
        server = serve_runner(runner, 0, "127.0.0.1")
        done = threading.Event()

        def scraper() -> None:
            while not done.is_set():
                took, values = _scrape(server.url)
                scrapes.append((time.monotonic(), took, values))
                done.wait(0.3)

        runner.submit_many([runner.spec("work", i) for i in range(TASKS)])
        with runner:
            scraping = threading.Thread(target=scraper, daemon=True)
            scraping.start()
            deadline = time.monotonic() + 60
            while len(effects) < 40 and time.monotonic() < deadline:  # well under way
                time.sleep(0.01)
            pg.stop()
            down_at = time.monotonic()
            time.sleep(OUTAGE_S)
            pg.start()
            back_at = time.monotonic()
            committed_before = runner.stats.completed
            while runner.stats.completed == committed_before and time.monotonic() < back_at + 30:
                time.sleep(0.01)
            resumed_s = time.monotonic() - back_at
            assert runner.join(60)
            done.set()
            scraping.join(10)
        server.close()
        counts = store.counts()
        outcomes = {t.task_id: t for t in store.all_tasks()}
    finally:
        store.close()
        cluster_cm.__exit__(None, None, None)

    assert counts[TaskStatus.SUCCESS] == TASKS  # nothing lost, nothing misreported
    assert not counts[TaskStatus.FAILED] and not counts[TaskStatus.PENDING]
    assert all(t.error_kind is None for t in outcomes.values())
    assert {task_id for _, task_id in effects} == set(outcomes)
    assert resumed_s <= 3.0, f"work resumed {resumed_s:.1f}s after the database came back"
    during = [s for s in scrapes if down_at + 1 < s[0] < back_at]
    assert during and all(values["taskfuse_store_up"] == 0 for _, _, values in during)
    assert max(took for _, took, _ in scrapes) <= 2.0
    assert scrapes[-1][2]["taskfuse_store_up"] == 1


@pytest.mark.slow
def test_a_worker_told_to_stop_during_an_outage_stops_within_its_grace() -> None:
    try:
        cluster_cm = private_cluster()
        pg = cluster_cm.__enter__()
    except (RuntimeError, OSError) as exc:
        if IN_CI:
            raise
        pytest.skip(f"cannot start a private PostgreSQL cluster: {exc}")
    started = threading.Event()
    app = App("outage")

    @app.task("slow", timeout=30)
    def slow(ctx, payload):
        started.set()
        ctx.sleep(0.5)
        return payload

    store = PostgresStore(f"{pg.url}?schema=tf&retry_for=60")  # the default budget is long
    try:
        runner = Runner(app, store, workers=2)
        runner.submit_many([runner.spec("slow", i) for i in range(20)])
        runner.start()
        assert started.wait(30)
        pg.stop()
        began = time.monotonic()
        runner.shutdown(grace_s=1.0)
        took = time.monotonic() - began
    finally:
        store.close()
        cluster_cm.__exit__(None, None, None)
    assert took <= 1.0 + 2.5, f"shutdown took {took:.1f}s with a grace of 1 s"
