"""DAGs and capped batches under real worker threads."""

from __future__ import annotations

import threading
import time

from taskfuse.core.states import BatchStatus, TaskStatus
from taskfuse.runtime import App, TaskError
from tests.runtime.conftest import JOIN_S


class Concurrency:
    """Counts how many task bodies run at once (recorded inside the task functions)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


def test_dag_runs_each_task_after_its_dependencies(make_runner) -> None:
    app = App()
    order: list[str] = []
    lock = threading.Lock()

    @app.task("step")
    def step(ctx, payload):
        time.sleep(0.01)
        with lock:
            order.append(ctx.task_id)

    runner = make_runner(app)
    graph = {"fetch": (), "prices": ("fetch",), "images": ("fetch",),
             "publish": ("prices", "images")}
    runner.submit_many([runner.spec("step", task_id=t, depends_on=d) for t, d in graph.items()])
    assert runner.join(JOIN_S)
    assert sorted(order) == sorted(graph)
    for task_id, deps in graph.items():
        assert all(order.index(dep) < order.index(task_id) for dep in deps)
    assert {runner.get(t).status for t in graph} == {TaskStatus.SUCCESS}


def test_dag_upstream_failure_cancels_dependents(make_runner) -> None:
    app = App()

    @app.task("fails", max_retry=0)
    def fails(ctx, payload):
        raise TaskError("bad_params", "no such sku")

    @app.task("never")
    def never(ctx, payload):
        raise AssertionError("a dependent of a failed task must not run")

    runner = make_runner(app)
    runner.submit_many([runner.spec("fails", task_id="up"),
                        runner.spec("never", task_id="down", depends_on=("up",)),
                        runner.spec("never", task_id="further", depends_on=("down",))])
    assert runner.join(JOIN_S)
    assert runner.get("up").status is TaskStatus.FAILED
    for task_id in ("down", "further"):
        task = runner.get(task_id)
        assert task.status is TaskStatus.CANCELED and task.error_kind == "upstream_failed"


def test_batch_cap_bounds_concurrency_below_the_worker_count(make_runner) -> None:
    app = App()
    inside = Concurrency()

    @app.task("sync")
    def sync(ctx, payload):
        with inside:
            time.sleep(0.02)

    runner = make_runner(app, workers=6)
    runner.submit_batch([runner.spec("sync", i) for i in range(12)], "skus", cap=2)
    assert runner.join(JOIN_S, batch_id="skus")
    assert inside.peak == 2  # reached, never exceeded
    assert runner.scheduler.batch_status("skus") is BatchStatus.ALL_SUCCESS


def test_a_capped_batch_does_not_hold_back_other_work(make_runner) -> None:
    app = App()
    capped, free = Concurrency(), Concurrency()

    @app.task("capped")
    def capped_task(ctx, payload):
        with capped:
            time.sleep(0.03)

    @app.task("free")
    def free_task(ctx, payload):
        with free:
            time.sleep(0.03)

    runner = make_runner(app, workers=5)
    runner.submit_batch([runner.spec("capped") for _ in range(6)], "slow-partner", cap=1)
    runner.submit_batch([runner.spec("free") for _ in range(12)], "bulk")
    assert runner.join(JOIN_S)
    assert capped.peak == 1 and free.peak >= 2
    assert runner.counts()[TaskStatus.SUCCESS] == 18
