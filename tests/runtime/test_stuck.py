"""Tasks that ignore their stop cannot steal capacity: a stuck thread is counted, replaced up
to the bound, retires when it returns, and a retry never runs beside its stuck attempt."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.limits.files import parse_limits
from taskfuse.observe.prometheus import WorkerMetrics
from taskfuse.runtime import App
from tests.runtime.conftest import JOIN_S


def _wait(predicate: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + JOIN_S
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.005)


def _hanging_app(release: threading.Event, limits: str = "") -> App:
    """`hang` ignores its stop until `release`; `quick` returns at once."""
    app = App.from_limits(parse_limits(limits or "retry: {max_retry: 0}\n"))

    @app.task("hang", timeout=0.2)
    def hang(ctx, payload):
        release.wait(JOIN_S)  # deaf to ctx.cancelled(), as a blocked socket read is
        return "late"

    @app.task("quick", timeout=10)
    def quick(ctx, payload):
        return "ok"

    return app


def test_stuck_threads_are_counted_exactly_and_replaced_up_to_the_bound(make_runner) -> None:
    release = threading.Event()
    runner = make_runner(_hanging_app(release), workers=2, stuck_after_s=0.05,
                         stuck_threads_max=1, watchdog_s=0.05)
    hangs = [runner.submit("hang") for _ in range(3)]
    _wait(lambda: len(runner.stuck_threads()) == 2, "both threads are stuck")
    # one replacement (the bound): it takes the third hang and is stuck too, not replaced
    _wait(lambda: len(runner.stuck_threads()) == 3, "the replacement is stuck as well")
    stuck = runner.stuck_threads()
    assert sorted(s["task_id"] for s in stuck) == sorted(t.task_id for t in hangs)
    assert [s["kind"] for s in stuck] == ["hang"] * 3
    assert sum(s["replaced"] for s in stuck) == 1 and runner.stats.replaced == 1
    assert all(runner.get(t.task_id).status is TaskStatus.TIMEOUT for t in hangs)
    metrics = WorkerMetrics(runner).registry
    assert metrics.get_sample_value("taskfuse_worker_stuck_threads") == 3
    assert metrics.get_sample_value("taskfuse_worker_stuck_threads_by_kind",
                                    {"kind": "hang"}) == 3
    assert runner.worker_beat().stuck_kinds == {"hang": 3}
    quick = runner.submit("quick")  # no thread is left to run it
    time.sleep(0.2)
    assert runner.get(quick.task_id).status is TaskStatus.PENDING
    release.set()  # the hung calls return: their late results are discarded
    assert runner.join(JOIN_S)
    assert runner.get(quick.task_id).status is TaskStatus.SUCCESS
    _wait(lambda: not runner.stuck_threads(), "no thread is stuck any more")
    _wait(lambda: runner.attempts.live_threads == 2, "the extra thread retired")
    assert runner.stats.discarded == 3
    assert runner.stats.retired == runner.stats.replaced  # every replacement's place given back


@pytest.mark.parametrize("overlap", [False, True])
def test_a_retry_waits_for_its_stuck_attempt_unless_the_kind_allows_overlap(
        make_runner, overlap: bool) -> None:
    release = threading.Event()
    limits = ("retry: {max_retry: 1, backoff: {kind: none}}\n"
              f"kinds: {{hang: {{overlap: {str(overlap).lower()}}}}}\n")
    app = _hanging_app(release, limits)
    starts: list[float] = []
    ended: list[float] = []
    original = app.tasks["hang"].fn

    def hang(ctx, payload):
        starts.append(time.monotonic())
        try:
            return original(ctx, payload)
        finally:
            ended.append(time.monotonic())

    app.tasks["hang"] = replace(app.tasks["hang"], fn=hang)
    runner = make_runner(app, workers=2, stuck_after_s=0.05, watchdog_s=0.05)
    task = runner.submit("hang")
    _wait(lambda: runner.get(task.task_id).retry_count == 1, "the first attempt timed out")
    if overlap:  # the second thread takes the retry beside the stuck first attempt
        _wait(lambda: len(starts) == 2, "the retry starts")
        assert not ended
    else:  # a free thread, a ready retry, and still it waits (a slow machine cannot fail this)
        time.sleep(0.3)
        assert len(starts) == 1
    release.set()
    assert runner.join(JOIN_S)
    assert len(starts) == 2
    if not overlap:
        assert starts[1] >= ended[0]  # the retry started after the first returned
