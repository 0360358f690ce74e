"""The shipped Prometheus alert rules, evaluated by the core's AlertEvaluator on recorded series.

Series are sampled every 15 s, Prometheus' usual evaluation interval. Each alert fires and
resolves at the sample a person would predict from its threshold and `for:`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfuse.core.metrics import default_rules
from taskfuse.core.states import TaskStatus
from taskfuse.observe.alerts import (
    Firing,
    PromAlert,
    Recording,
    RulesError,
    Sample,
    evaluate,
    firings,
    load_alerts,
    load_rules,
    main,
    parse_duration,
    rules_path,
    to_core,
)
from taskfuse.runtime import App, TaskError
from tests.observe.conftest import WAIT_S, wait_for

STEP = 15.0


def _times(end: float) -> list[float]:
    return [i * STEP for i in range(int(end / STEP) + 1)]


def _fired(recording: Recording, **kw) -> list[Firing]:
    return firings(evaluate(load_rules(), recording, **kw))


def test_the_rules_file_is_package_data_and_every_alert_is_checkable() -> None:
    path = rules_path()
    assert path.is_file() and path.name == "taskfuse.rules.yml"
    names = [a.name for a in load_alerts()]
    assert names == ["TaskfuseRunningAboveLimit", "TaskfuseQueueDepthHigh",
                     "TaskfuseSuccessRateLow", "TaskfuseP99AboveHistory",
                     "TaskfuseStuckThreads", "TaskfuseLoopLagHigh"]
    assert len(load_rules()) == 6  # none refused


def test_the_rules_file_says_what_the_core_says() -> None:
    """Thresholds, durations and guards equal default_rules; the limit is a series there."""
    shipped = {c.rule.metric: c for c in load_rules()}
    for core in default_rules(running_limit=8.0):
        checked = shipped[core.metric]
        rule = checked.rule
        assert (rule.op, rule.for_s, rule.min_samples) == (core.op, core.for_s,
                                                            core.min_samples), core.name
        if core.metric == "running":
            assert checked.threshold_from == "running_limit"
        else:
            assert rule.threshold == core.threshold, core.name


def test_queue_depth_above_500_for_10_minutes_fires_and_resolves() -> None:
    depth = {t: 600 if 60 <= t <= 900 else 100 for t in _times(1200)}
    rec = Recording([Sample(t, queue_depth=d) for t, d in depth.items()])
    assert _fired(rec) == [Firing("TaskfuseQueueDepthHigh", 660.0, 915.0)]


def test_a_short_queue_spike_does_not_fire() -> None:
    rec = Recording([Sample(t, queue_depth=900 if 60 <= t < 600 else 0) for t in _times(900)])
    assert _fired(rec) == []


def test_running_above_the_fleets_limit_for_5_minutes_fires_and_resolves() -> None:
    rec = Recording([Sample(t, running=10 if 60 <= t <= 500 else 6, running_limit=8)
                     for t in _times(800)])
    assert _fired(rec) == [Firing("TaskfuseRunningAboveLimit", 360.0, 510.0)]


def test_the_running_limit_is_read_from_its_series() -> None:
    """A third worker joins at t=200: the limit grows to 12 and the condition ends."""
    rec = Recording([Sample(t, running=10, running_limit=8 if t < 200 else 12)
                     for t in _times(800)])
    assert _fired(rec) == []
    no_limit = Recording([Sample(t, running=10, running_limit=None) for t in _times(800)])
    assert _fired(no_limit) == []  # an unknown limit cannot be exceeded


def test_success_rate_below_95_percent_fires_after_20_tasks_and_resolves() -> None:
    phases = [(0, 18, 1), (60, 18, 2), (120, 30, 2), (180, 48, 2)]  # (from t, ok, failed)
    samples = []
    for t in _times(240):
        _, ok, failed = [p for p in phases if p[0] <= t][-1]
        samples.append(Sample(t, success=ok, failed=failed))
    # 18/19 is below 95 % but only 19 finished; 18/20 fires; 30/32 still low; 48/50 resolves.
    assert _fired(Recording(samples)) == [Firing("TaskfuseSuccessRateLow", 60.0, 180.0)]


def test_p99_above_twice_its_history_fires_and_resolves() -> None:
    rec = Recording()
    n = 0

    def run(start: float, end: float, every: float, duration: float) -> None:
        nonlocal n
        t = start
        while t < end:
            rec.task(f"t{n}", "skus", t, t + duration)
            n += 1
            t += every

    run(0, 1000, 4, 1.0)  # history: 250 tasks of 1 s
    run(1000, 1150, 5, 3.0)  # 30 slow ones
    run(1150, 1800, 4, 1.0)  # fast again
    ends = sorted(e.t for e in rec.events if e.dst == "SUCCESS")
    rec.samples = [Sample(t, success=sum(1 for x in ends if x <= t)) for t in _times(1800)]
    [firing] = _fired(rec)
    assert firing.alert == "TaskfuseP99AboveHistory"
    assert 1000 < firing.fired_at <= 1100  # once the slow tasks are over 1 % of the window
    # resolves once the last slow task (ended t=1148) has left the 5-minute window; the
    # evaluator recomputes a percentile only every so often, so allow it a minute
    assert 1148 + 300 <= firing.resolved_at <= 1148 + 300 + 60


def test_a_configured_p99_baseline_is_honoured() -> None:
    rec = Recording()
    for i in range(30):
        rec.task(f"t{i}", None, i * 10.0, i * 10.0 + 3.0)
    rec.samples = [Sample(t, success=30) for t in _times(400)]
    assert _fired(rec) == []  # without a configured history: too few tasks to have one
    [firing] = _fired(rec, p99_baseline_s={"*": 1.0})
    assert firing.alert == "TaskfuseP99AboveHistory"


def test_a_lagging_event_loop_for_a_minute_fires_and_resolves() -> None:
    """A coroutine holds the loop 400 ms at a time from t=60 to t=180: the lag is over
    100 ms for a minute at t=120; the first healthy sample (t=195) resolves it."""
    lag = {t: 0.4 if 60 <= t <= 180 else 0.003 for t in _times(300)}
    rec = Recording([Sample(t, loop_lag=v) for t, v in lag.items()])
    assert _fired(rec) == [Firing("TaskfuseLoopLagHigh", 120.0, 195.0)]


def test_a_healthy_or_short_lag_and_a_worker_without_a_loop_stay_quiet() -> None:
    healthy = Recording([Sample(t, loop_lag=0.02) for t in _times(600)])
    blip = Recording([Sample(t, loop_lag=0.9 if 60 <= t < 105 else 0.0) for t in _times(600)])
    threads_only = Recording([Sample(t, loop_lag=None) for t in _times(600)])
    assert _fired(healthy) == _fired(blip) == _fired(threads_only) == []


def test_expressions_outside_the_checkable_form_are_refused_by_name() -> None:
    for expr in ("rate(taskfuse_tasks_finished_total[5m]) > 1",
                 "taskfuse:queue_depth > taskfuse:success_rate",
                 "taskfuse:nonsense > 1",
                 "taskfuse:success_rate < 0.9 and taskfuse:queue_depth >= 3"):
        with pytest.raises(RulesError, match="MyAlert"):
            to_core(PromAlert("MyAlert", expr))
    rule = to_core(PromAlert("Ok", "taskfuse:queue_depth > 1e3", parse_duration("1h30m"))).rule
    assert (rule.threshold, rule.for_s) == (1000.0, 5400.0)
    with pytest.raises(RulesError):
        parse_duration("5 minutes")


def test_a_changed_copy_of_the_rules_file_is_what_gets_checked(tmp_path: Path) -> None:
    text = rules_path().read_text("utf-8").replace("taskfuse:queue_depth > 500",
                                                   "taskfuse:queue_depth > 50")
    copy = tmp_path / "mine.rules.yml"
    copy.write_text(text)
    rec = Recording([Sample(t, queue_depth=100) for t in _times(900)])
    assert firings(evaluate(load_rules(copy), rec)) == [
        Firing("TaskfuseQueueDepthHigh", 600.0, None)]


# -- a real run's trace as the recorded series ---------------------------------------------


def test_the_alerts_over_a_real_runs_trace(make_runner, tmp_path, capsys) -> None:
    app = App()

    @app.task("sync", max_retry=0)
    def sync(ctx, payload):
        if payload == "bad":
            raise TaskError("bad_params", "rejected")
        return payload

    path = tmp_path / "run.trace"
    runner = make_runner(app, workers=4, trace=path, trace_interval_s=0.02)
    runner.submit_many([runner.spec("sync", i) for i in range(18)]
                       + [runner.spec("sync", "bad") for _ in range(2)])
    assert runner.join(WAIT_S)
    wait_for(lambda: any((s.success, s.failed) == (18, 2)  # sampled while the rate is low
                         for s in Recording.from_trace(path).samples), "a sample at 18/20")
    runner.submit_many([runner.spec("sync", i) for i in range(30)])
    assert runner.join(WAIT_S)
    runner.shutdown()
    assert runner.counts()[TaskStatus.FAILED] == 2

    rec = Recording.from_trace(path)
    assert rec.samples[-1].success == 48 and rec.samples[-1].running_limit == 4
    [firing] = firings(evaluate(load_rules(), rec))
    assert firing.alert == "TaskfuseSuccessRateLow" and firing.resolved_at is not None

    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TaskfuseSuccessRateLow: fired at t=") and "resolved at" in out
    assert main([str(path), "--fail-if-fired"]) == 1
    assert main([str(tmp_path / "missing.trace")]) == 2
