"""A real worker's trace in the monitor: two runners share one SQLite store (a fleet of two
processes' worth of threads); one of them writes a trace.

What the issue saw: `run 12/4` (the store's RUNNING count over this process's threads), "no
batches in this trace" although every task had one, and the title `trace seed=None`.
"""

from __future__ import annotations

import threading
from pathlib import Path

from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, Runner
from taskfuse.store import open_store
from taskfuse.trace import read_trace
from tui.sources import TraceSource
from tui.trace_model import TraceModel

JOIN_S = 20.0
A_THREADS, B_THREADS = 2, 6


def test_a_worker_traces_its_own_running_and_the_monitor_counts_its_batches(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    app = App("sync")
    started = threading.Condition()
    running = [0]
    release = threading.Event()

    @app.task("hold", max_retry=0)
    def hold(ctx: object, payload: object) -> str:
        with started:
            running[0] += 1
            started.notify_all()
        release.wait(JOIN_S)
        return "ok"

    path = tmp_path / "a.trace"
    a = Runner(app, open_store(url), workers=A_THREADS, worker_id="host-a:1", trace=path,
               trace_interval_s=60.0)
    b = Runner(app, open_store(url), workers=B_THREADS, worker_id="host-b:2")
    try:
        a.submit_many([a.spec("hold", i) for i in range(12)], batch_id="skus")
        a.start()
        b.start()
        with started:  # every thread of both processes holds a task: 8 RUNNING in the store
            assert started.wait_for(lambda: running[0] == A_THREADS + B_THREADS, JOIN_S)
        assert a.store.counts()[TaskStatus.RUNNING] == A_THREADS + B_THREADS
        a._tracer.sample()  # one sample now, with the whole fleet busy
        release.set()
        assert a.join(JOIN_S, batch_id="skus")
    finally:
        release.set()
        a.shutdown(grace_s=5.0)
        b.shutdown(grace_s=5.0)
        a.store.close()  # type: ignore[attr-defined]
        b.store.close()  # type: ignore[attr-defined]

    trace = read_trace(path)
    assert trace.header["scenario"] == "sync" and trace.header["seed"] is None
    _, run = trace.series("running")
    _, limit = trace.series("running_limit")
    assert run.max() == A_THREADS and (limit == A_THREADS).all()  # never 8/2

    src = TraceSource.open(path)
    assert src.first is not None
    model = TraceModel.of_source(src)
    assert model.meta.title == "sync on host-a:1"
    (batch,) = model.snapshot(model.span[1]).batches
    done_here = sum(1 for e in trace.events(kind="move") if e.dst == "SUCCESS")
    assert batch.batch_id == "skus" and batch.final
    assert batch.counts["SUCCESS"] == done_here > 0  # the tasks this worker ran and ended
    assert batch.p99 is not None and batch.p99 > 0


def test_a_task_an_operator_retried_is_pending_again_in_the_trace(tmp_path: Path) -> None:
    """`taskfuse retry` (another process) reopens an ended task without adding one: the
    store's task count does not move, so the trace did not look for it, and the followed run
    showed it FAILED while the store held it PENDING (until a worker claimed it again)."""
    from taskfuse.runtime.tracing import RuntimeTrace

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    app = App("sync")

    @app.task("fail", max_retry=0)
    def fail(ctx: object, payload: object) -> None:
        raise ValueError("partner said no")

    path = tmp_path / "a.trace"
    worker = Runner(app, open_store(url), workers=1, worker_id="host-a:1")
    operator = Runner(app, open_store(url), workers=1)  # `taskfuse retry`: never started
    tracer = RuntimeTrace(worker, path, interval_s=60.0)  # outlives the worker's threads
    try:
        task = worker.submit("fail", batch_id="skus")
        worker.start()
        assert worker.join(JOIN_S, batch_id="skus")
        worker.shutdown(grace_s=5.0)
        tracer.sample()
        assert len(operator.retry("skus").retried) == 1
        tracer.sample()
    finally:
        tracer.close()
        worker.shutdown(grace_s=5.0)
        worker.store.close()  # type: ignore[attr-defined]
        operator.store.close()  # type: ignore[attr-defined]
    submits = list(read_trace(path).events(kind="submit"))
    assert [e.task_id for e in submits] == [task.task_id] * 2  # submitted, then reopened
    src = TraceSource.open(path)
    assert src.first is not None
    model = TraceModel.of_source(src)
    (batch,) = model.snapshot(model.span[1]).batches
    assert batch.counts["PENDING"] == 1 and batch.counts["FAILED"] == 0
