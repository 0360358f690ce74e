"""Schedule ticks with a fake clock: DST gaps and overlaps, missed ticks, the per-tick ids."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from taskfuse.core.ticks import (
    Cron,
    ScheduleError,
    due,
    last_tick,
    next_tick,
    tick_batch_id,
    tick_key,
    ticks,
)

PARIS = ZoneInfo("Europe/Paris")


def at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def local(t: float) -> str:
    return datetime.fromtimestamp(t, PARIS).isoformat()


def test_a_fixed_time_in_the_spring_gap_runs_once_right_after_it() -> None:
    cron = Cron("30 2 * * *", PARIS)  # 02:30 does not exist on 2026-03-29 in Paris
    day = list(ticks(cron, at("2026-03-28T12:00:00+01:00"), at("2026-03-30T12:00:00+02:00")))
    assert [local(t) for t in day] == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]


def test_a_fixed_time_in_the_autumn_overlap_runs_once_at_its_first_pass() -> None:
    cron = Cron("30 2 * * *", PARIS)  # 02:30 happens twice on 2026-10-25 in Paris
    day = list(ticks(cron, at("2026-10-24T12:00:00+02:00"), at("2026-10-26T12:00:00+01:00")))
    assert [local(t) for t in day] == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
    # a worker asking during the second pass finds the first pass's tick, already handled
    first = day[0]
    assert due(cron, first, at("2026-10-25T02:45:00+01:00"), "run_last_once") == []


def test_a_wildcard_schedule_follows_real_time_through_both_changes() -> None:
    cron = Cron("*/30 * * * *", PARIS)
    spring = ticks(cron, at("2026-03-29T01:00:00+01:00"), at("2026-03-29T03:30:00+02:00"))
    assert [local(t) for t in spring] == [
        "2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]
    autumn = ticks(cron, at("2026-10-25T01:30:00+02:00"), at("2026-10-25T03:00:00+01:00"))
    assert [local(t) for t in autumn] == [
        "2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00"]


def test_the_first_and_the_latest_tick_around_any_instant() -> None:
    every_second = Cron("* * * * * *", PARIS)
    assert next_tick(every_second, 100.0) == 101.0
    assert next_tick(every_second, 100.5) == 101.0
    assert last_tick(every_second, 100.5) == 100.0
    assert last_tick(every_second, 100.0) == 100.0
    nightly = Cron("0 2 * * *", PARIS)
    assert local(last_tick(nightly, at("2026-12-02T01:59:59+01:00")) or 0) == \
        "2026-12-01T02:00:00+01:00"


def test_a_tick_on_time_is_due_once_under_both_policies() -> None:
    cron = Cron("0 2 * * *", PARIS)
    tick = at("2026-12-02T02:00:00+01:00")
    for policy in ("skip", "run_last_once"):
        assert due(cron, tick - 3600, tick + 0.2, policy) == [tick]
        assert due(cron, tick + 0.2, tick + 5, policy) == []  # handled: never twice
        assert due(cron, None, tick + 30, policy, grace_s=60) == [tick]  # a worker just started


def test_a_loop_woken_late_submits_every_tick_still_on_time() -> None:
    every_second = Cron("* * * * * *", PARIS)
    assert due(every_second, 100.2, 103.7, "skip", grace_s=60) == [101.0, 102.0, 103.0]
    assert due(every_second, 100.2, 103.7, "skip", grace_s=1.5) == [103.0]
    # a worker that just started takes the latest on-time tick only, never a back-fill
    assert due(every_second, None, 100.5, "skip", grace_s=2) == [100.0]
    assert due(every_second, None, 100.5, "skip", grace_s=0.4) == []
    assert due(every_second, None, 100.5, "run_last_once", grace_s=0.4) == [100.0]


def test_ticks_missed_while_no_worker_ran_follow_the_policy() -> None:
    cron = Cron("0 2 * * *", PARIS)
    down = at("2026-12-01T20:00:00+01:00")  # the last worker stopped; three nights pass
    back = at("2026-12-04T09:00:00+01:00")
    assert due(cron, down, back, "skip") == []
    assert due(cron, None, back, "skip") == []
    last = at("2026-12-04T02:00:00+01:00")  # the latest night only, never the two before
    assert due(cron, down, back, "run_last_once") == [last]
    assert due(cron, None, back, "run_last_once") == [last]
    assert due(cron, back, back + 60, "run_last_once") == []
    assert next_tick(cron, back) == at("2026-12-05T02:00:00+01:00")


def test_each_tick_names_one_batch_and_one_key_per_task() -> None:
    assert tick_batch_id("nightly", at("2026-12-02T02:00:00+01:00")) == \
        "nightly@2026-12-02T01:00:00Z"
    assert tick_key("nightly", at("2026-12-02T02:00:00+01:00"), 3) == \
        "schedule:nightly@2026-12-02T01:00:00Z#3"


@pytest.mark.parametrize("expr", ["61 * * * *", "* * *", "every day", "0 0 31 2 *"])
def test_an_unreadable_expression_is_one_clear_error(expr: str) -> None:
    with pytest.raises(ScheduleError, match="cron expression"):
        Cron(expr, PARIS)
