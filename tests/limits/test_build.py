"""The one builder: the same values give the same fuses, policies and rules to every driver."""

from __future__ import annotations

import pytest

from taskfuse.core.guard import GO, QUEUED, Pace
from taskfuse.core.metrics import default_rules
from taskfuse.core.retry import RetryBudget, RetryTokens
from taskfuse.limits.build import (
    alert_rules,
    build_guard,
    build_scheduler,
    heartbeat_interval,
    retry_budget,
    running_limit,
)
from taskfuse.limits.files import parse_limits
from taskfuse.limits.schema import Alerts, ClientLimits, Limits, RateSpec
from taskfuse.store.memory import MemoryStore


def _client(**kw: object) -> ClientLimits:
    return ClientLimits.model_validate(kw)


def test_a_process_share_splits_the_limits_and_the_lab_keeps_them_whole() -> None:
    client = _client(bulkhead=14, rate_limit={"rate": 100, "burst": 20}, instances=4)
    mine = build_guard("p", client, 0.0)
    whole = build_guard("p", client, 0.0, whole_fleet=True)
    assert (mine.bulkhead.limit, whole.bulkhead.limit) == (3, 14)
    assert (mine.bucket.rate, mine.bucket.burst) == (25.0, 5.0)
    assert (whole.bucket.rate, whole.bucket.burst) == (100.0, 20.0)


def test_a_fleet_rate_is_left_to_the_database_but_the_lab_models_it() -> None:
    client = _client(bulkhead=5, rate_limit=RateSpec(rate=10), scope="fleet")
    assert build_guard("p", client, 0.0).bucket is None
    assert build_guard("p", client, 0.0, whole_fleet=True).bucket is not None


def test_a_guard_built_from_limits_answers_as_its_fuses_say() -> None:
    guard = build_guard("p", _client(bulkhead=1, rate_limit={"rate": 2, "burst": 1}), 0.0)
    assert guard.admit("a", 0.0) is GO
    assert guard.admit("b", 0.0) is QUEUED
    assert guard.record(0.1, True, 0.1) == ["b"]
    assert guard.resume(0.1) == Pace(pytest.approx(0.4))


def test_adaptive_limits_start_from_the_bulkhead() -> None:
    guard = build_guard("p", _client(bulkhead=8, adaptive={"kind": "vegas", "min": 2,
                                                            "max": 40}), 0.0)
    assert guard.adaptive is not None and guard.bulkhead.limit == guard.adaptive.limit == 8


def test_the_alert_rules_are_the_cores_with_the_files_thresholds() -> None:
    assert alert_rules(Alerts(), 10.0) == default_rules(10.0)
    custom = alert_rules(Alerts(queue_depth=50, min_finished=5, p99_ratio=3), 4.0)
    by_name = {r.name: r for r in custom}
    assert by_name["queue_depth_high"].threshold == 50
    assert by_name["p99_above_history"].min_samples == 5  # the p99 rule no longer drifts
    assert by_name["success_rate_low"].min_samples == 5
    assert by_name["p99_above_history"].threshold == 3


def test_running_limit_is_the_files_or_the_workers() -> None:
    assert running_limit(Limits(workers=7)) == 7.0
    assert running_limit(Limits(workers=7, alerts=Alerts(running_limit=3))) == 3.0
    assert running_limit(Limits(workers="unbounded")) == 1e9
    with_async = {"workers": 7, "async_concurrency": 500, "kinds": {"io": {"executor": "async"}}}
    assert running_limit(Limits.model_validate(with_async)) == 507.0
    assert running_limit(Limits(workers=7, async_concurrency=500)) == 7.0  # no async kind


def test_budgets_of_both_kinds_are_built_fresh() -> None:
    assert retry_budget(None) is None
    ratio = parse_limits("retry: {budget: {ratio: 0.2}}\n").retry.budget
    tokens = parse_limits("retry: {budget: {kind: tokens, capacity: 10}}\n").retry.budget
    assert isinstance(retry_budget(ratio), RetryBudget)
    built = retry_budget(tokens)
    assert isinstance(built, RetryTokens) and built.tokens == 10
    assert retry_budget(tokens) is not built


def test_the_scheduler_gets_policies_per_kind_timeouts_and_guards() -> None:
    limits = parse_limits(
        "task_timeout_s: 7\n"
        "retry: {max_retry: 1}\n"
        "kinds:\n  slow: {retry: {max_retry: 4}}\n"
        "sweeper: {lease_s: 9, max_pending_age_s: 100}\n"
        "downstreams:\n  api: {client: {bulkhead: 2}}\n"
    )
    sched = build_scheduler(limits, MemoryStore(), extra_fatal=frozenset({"boom"}))
    assert sched.config.default_timeout == 7
    assert (sched.config.lease_s, sched.config.max_pending_age_s) == (9, 100)
    assert sched.policy_for("other").max_retry == 1
    assert sched.policy_for("slow").max_retry == 4
    assert "boom" in sched.policy_for("slow").fatal and "boom" in sched.policy.fatal
    assert sched.guards["api"].bulkhead.limit == 2


def test_the_heartbeat_is_a_third_of_the_lease_unless_given() -> None:
    assert heartbeat_interval(parse_limits("sweeper: {lease_s: 9}\n")) == 3
    assert heartbeat_interval(parse_limits("sweeper: {lease_s: 9, heartbeat_s: 1}\n")) == 1
    assert heartbeat_interval(Limits()) == 10.0
