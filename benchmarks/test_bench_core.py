"""Core throughput: submit, and claim+complete cycles through Scheduler + MemoryStore.

An event sink is attached (a list append, as the lab's trace buffer does). Two sizes show
that the cost per task does not grow with the number of tasks already done.

    .venv/bin/python -m pytest benchmarks/test_bench_core.py --benchmark-only
"""

from __future__ import annotations

import random

import pytest

from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.store.memory import MemoryStore
from taskfuse.tuning import collect_rarely

SIZES = [10_000, 100_000]
OK = Outcome.success(None)


def _scheduler() -> tuple[Scheduler, list]:
    events: list = []
    return Scheduler(MemoryStore(), rng=random.Random(1), sinks=[events.append]), events


def _submit_all(n: int) -> Scheduler:
    sched, _ = _scheduler()
    spec = TaskSpec("sync")
    sched.submit_many([spec] * n, 0.0)
    return sched


def _drain(sched: Scheduler) -> int:
    done = 0
    now = 0.0
    claim, complete = sched.claim, sched.complete
    while True:
        answer = claim("w", now)
        if not isinstance(answer, Work):
            return done
        for task in answer.tasks:
            now += 0.001
            complete(task, OK, now)
            done += 1


@pytest.mark.parametrize("n", SIZES)
def test_submit(benchmark, n: int) -> None:
    benchmark.group = "core: submit"
    benchmark.extra_info["tasks"] = n
    sched = benchmark.pedantic(_submit_all, args=(n,), rounds=3, iterations=1)
    assert sched.counts()["PENDING"] == n


@pytest.mark.parametrize("gc_mode", ["default", "rare"])
@pytest.mark.parametrize("n", SIZES)
def test_claim_complete(benchmark, n: int, gc_mode: str) -> None:
    """claim + complete cycles; per-task cost = median / n.

    `rare` runs as the drivers do (taskfuse.tuning.collect_rarely): with the default
    collector the cost per cycle grows with the number of live task records, because every
    full collection rescans them; with rare collections it stays flat.
    """
    benchmark.group = "core: claim+complete"
    benchmark.extra_info["tasks"] = n

    def drain(sched: Scheduler) -> int:
        if gc_mode == "rare":
            with collect_rarely():
                return _drain(sched)
        return _drain(sched)

    done = benchmark.pedantic(drain, setup=lambda: ((_submit_all(n),), {}), rounds=3)
    benchmark.extra_info["us_per_cycle"] = round(benchmark.stats.stats.median / n * 1e6, 2)
    assert done == n
