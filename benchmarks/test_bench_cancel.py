"""Cancel of a live 20k batch: one statement per store against a cancel per task.

`one_statement` is `Scheduler.cancel_batch` (the store moves the batch at once);
`per_task` is how it was done before, kept here as the reference: read the live tasks, then
one compare-and-set each. 20,000 tasks, 2,000 of them RUNNING, on SQLite and PostgreSQL;
two rounds, each from a fresh store (setup not timed).

    .venv/bin/python -m pytest benchmarks/test_bench_cancel.py --benchmark-only \
        --benchmark-group-by=param:backend
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from tests.store.backends import postgres_store, sqlite_store

N, RUNNING = 20_000, 2_000
STORES = {"sqlite": sqlite_store, "postgres": postgres_store}


def _per_task(sched: Scheduler, batch_id: str, now: float) -> int:
    live = sched.store.batch_tasks(batch_id, (TaskStatus.PENDING, TaskStatus.RUNNING))
    return sum(1 for t in live if sched.cancel(t.task_id, now, "bench") is not None)


def _one_statement(sched: Scheduler, batch_id: str, now: float) -> int:
    return sched.cancel_batch(batch_id, now, "bench")


WAYS: dict[str, Callable[[Scheduler, str, float], int]] = {
    "per_task": _per_task, "one_statement": _one_statement}


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    with ExitStack() as stack:
        yield lambda backend: stack.enter_context(STORES[backend](tmp_path))


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("backend", sorted(STORES))
def test_cancel_a_live_batch(benchmark: Any, stores: Callable[[str], Any], backend: str,
                             way: str) -> None:
    def setup() -> tuple[tuple[Scheduler], dict[str, Any]]:
        sched = Scheduler(stores(backend))
        sched.submit_batch([TaskSpec("k")] * N, 1.0, "b")
        sched.claim("w", 2.0, RUNNING)
        return (sched,), {}

    def cancel(sched: Scheduler) -> None:
        assert WAYS[way](sched, "b", 3.0) == N
        assert sched.store.counts("b")[TaskStatus.CANCELED] == N

    benchmark.pedantic(cancel, setup=setup, rounds=2, iterations=1)
