"""Runtime throughput: no-op tasks through the threaded Runner beside a raw thread pool.

Both sides run N no-op jobs on 4 threads, submission included, in the same session:

* raw: `ThreadPoolExecutor(4)` with a `threading.Semaphore(4)` around each job, as the
  source article's fix does it — no lifecycle, no records;
* runner: `Runner(workers=4)` on a MemoryStore — every task is submitted, claimed, run with a
  context and completed through the core's transition table and version checks.

The runner's `extra_info` carries `ratio_vs_raw` (its throughput over raw's; aim >= 0.5).

A second group puts the two executors side by side: the same no-op kind registered with
``executor="thread"`` and with ``executor="process"`` (N_EXEC tasks, 4 threads, each thread
driving one task process that is started once, in the warm-up round). Its `extra_info`
carries `ratio_vs_thread`: what a process task's round trip costs when the task does nothing.

    python -m pytest benchmarks/test_bench_runtime.py --benchmark-only
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from taskfuse.runtime import App, Runner
from taskfuse.store.memory import MemoryStore

N = 5_000
N_EXEC = 2_000
WORKERS = 4
GROUP = f"runtime: {N} no-op tasks, {WORKERS} threads"
GROUP_EXEC = f"runtime executors: {N_EXEC} no-op tasks, {WORKERS} threads"
_medians: dict[str, float] = {}

app = App("bench")


def noop(ctx: object, payload: object) -> None:
    return None


app.task("noop")(noop)
app.task("noop_process", executor="process")(noop)


def _noop() -> None:
    return None


def test_raw_thread_pool_with_semaphore(benchmark) -> None:
    benchmark.group = GROUP
    sem = threading.Semaphore(WORKERS)

    def job() -> None:
        with sem:
            _noop()

    with ThreadPoolExecutor(WORKERS) as pool:

        def one_round() -> int:
            futures = [pool.submit(job) for _ in range(N)]
            wait(futures)
            return len(futures)

        done = benchmark.pedantic(one_round, rounds=9, warmup_rounds=1, iterations=1)
    assert done == N
    _record(benchmark, "raw")


def test_runner_memory_store(benchmark) -> None:
    benchmark.group = GROUP
    runner = Runner(app, MemoryStore(), workers=WORKERS).start()
    specs = [runner.spec("noop")] * N
    try:

        def one_round() -> bool:
            runner.submit_many(specs)
            return runner.join(timeout=60)

        assert benchmark.pedantic(one_round, rounds=9, warmup_rounds=1, iterations=1)
    finally:
        runner.shutdown()
    assert runner.stats.completed == 10 * N
    _record(benchmark, "runner")
    if "raw" in _medians:
        ratio = _medians["raw"] / _medians["runner"]
        benchmark.extra_info["ratio_vs_raw"] = round(ratio, 3)
        print(f"\nrunner/raw throughput: {ratio:.2f} "
              f"({N / _medians['runner']:,.0f} vs {N / _medians['raw']:,.0f} tasks/s)")


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_executor(benchmark, executor: str) -> None:
    benchmark.group = GROUP_EXEC
    runner = Runner(app, MemoryStore(), workers=WORKERS).start()
    specs = [runner.spec("noop" if executor == "thread" else "noop_process")] * N_EXEC
    try:

        def one_round() -> bool:
            runner.submit_many(specs)
            return runner.join(timeout=120)

        assert benchmark.pedantic(one_round, rounds=7, warmup_rounds=1, iterations=1)
        assert runner.stats.completed == 8 * N_EXEC
        assert runner.procs.started == (WORKERS if executor == "process" else 0)
    finally:
        runner.shutdown()
    _record(benchmark, executor, N_EXEC)
    if executor == "process" and "thread" in _medians:
        ratio = _medians["thread"] / _medians["process"]
        benchmark.extra_info["ratio_vs_thread"] = round(ratio, 3)
        print(f"\nprocess/thread executor throughput: {ratio:.3f} "
              f"({N_EXEC / _medians['process']:,.0f} vs {N_EXEC / _medians['thread']:,.0f} "
              f"tasks/s)")


def _record(benchmark: pytest.FixtureRequest, name: str, n: int = N) -> None:
    median = benchmark.stats.stats.median
    _medians[name] = median
    benchmark.extra_info["tasks_per_s"] = round(n / median)
