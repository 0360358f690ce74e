"""CI's regression gate: stable figures against the committed baseline (benchmarks/).

Deterministic figures are held exactly (simpy events of the lab and of the minimal model,
calls per cycle, statements per task, every shipped scenario's report), a shipped scenario
must be in the baseline, and the lab stays within its wall-time ratio to the minimal model
measured in this same run. `make baseline` rewrites the baseline on purpose.
"""

from __future__ import annotations

import copy
import json

import pytest

from benchmarks import regression

# The gate's CPU ratios are timed: `make test` runs this file alone, after the rest (which
# runs on two processes).
pytestmark = pytest.mark.serial

SHIPPED = sorted(p.name for p in (regression.ROOT / "scenarios").glob("*.yaml"))


def _base() -> dict:
    return json.loads(regression.BASELINE.read_text())


def test_no_regression_against_the_committed_baseline() -> None:
    now = regression.measure()
    assert set(now) == set(regression.FIGURES)
    assert regression.compare(now, _base()) == []


def test_every_shipped_scenario_is_in_the_baseline() -> None:
    assert sorted(_base()["scenarios"]) == SHIPPED


def test_incident_breaks_and_fix_keeps_their_slos_in_the_baseline() -> None:
    base = _base()["scenarios"]
    assert base["incident.yaml"]["exit"] == 1
    assert base["incident-fixed.yaml"]["exit"] == 0


def test_deterministic_figures_are_held_exactly() -> None:
    base = _base()
    worse = copy.deepcopy(base)
    worse["simpy_events"]["minimal"] += 1
    worse["core_calls_per_cycle"] = base["core_calls_per_cycle"] + 0.01
    worse["scenarios"]["incident.yaml"]["exit"] = 0
    worse["scenarios"]["retry-storm.yaml"]["report_sha256"] = "0" * 64
    problems = regression.compare(worse, base)
    assert len(problems) == 4
    assert any(p.startswith("simpy_events.minimal:") for p in problems)
    assert any(p.startswith("core_calls_per_cycle:") for p in problems)
    assert any("incident.yaml.exit: 0 vs baseline 1" in p for p in problems)
    assert any("retry-storm.yaml.report_sha256" in p for p in problems)


def test_a_scenario_missing_from_the_baseline_fails_and_so_does_one_gone() -> None:
    base = _base()
    now = copy.deepcopy(base)
    now["scenarios"]["brand-new.yaml"] = dict(base["scenarios"]["incident.yaml"])
    del now["scenarios"]["seed-demo.yaml"]
    problems = regression.compare(now, base)
    assert any("brand-new.yaml is shipped but not in the baseline" in p for p in problems)
    assert any("seed-demo.yaml is in the baseline but no longer shipped" in p for p in problems)


def test_a_figure_missing_from_the_baseline_fails() -> None:
    base = _base()
    del base["sqlite_statements_per_task"]
    problems = regression.compare(_base(), base)
    assert problems == ["sqlite_statements_per_task: not in the baseline (run `make baseline`)"]


@pytest.mark.parametrize(("name", "slack"), [
    ("lab_over_minimal_wall", regression.TIME_RATIO_SLACK),
    ("lab_over_minimal_calls", regression.RATIO_SLACK)])
def test_each_cost_ratio_has_its_slack_and_no_more(name: str, slack: float) -> None:
    base = _base()
    limit = base[name] * slack
    within = dict(base, **{name: round(limit - 0.001, 3)})
    beyond = dict(base, **{name: round(limit + 0.01, 3)})
    assert regression.compare(within, base) == []
    assert [p.split(":")[0] for p in regression.compare(beyond, base)] == [name]


#: Shipped scenarios with no recorded load test yet: their kinds are `executor: async`, which
#: the load test runs only once the runtime has the async executor (issue 24).
AWAITING_LOAD_TEST = {"fleet-async"}


def test_a_fit_round_trip_that_changed_is_reported() -> None:
    base = _base()
    shipped = {p.stem for p in (regression.ROOT / "scenarios").glob("*.yaml")
               } - AWAITING_LOAD_TEST
    assert len(shipped) >= 7 and set(base["fit_round_trip"]) == shipped, (
        "every shipped scenario needs a recorded load test in benchmarks/runs")
    worse = copy.deepcopy(base)
    worse["fit_round_trip"]["incident"]["makespan_rel"] = 0.2
    problems = regression.compare(worse, base)
    assert [p.split(":")[0] for p in problems] == ["fit_round_trip.incident"]


def test_store_ratios_fail_beyond_their_slack_and_pass_without_the_store() -> None:
    base = _base()
    for name in ("sqlite_runner_over_minimal_cpu", "postgres_runner_over_minimal_cpu"):
        compare = regression.FIGURES[name].compare
        limit = base[name] * regression.STORE_RATIO_SLACK
        assert compare(name, round(limit * 1.01, 3), base[name]) != []
        assert compare(name, round(limit * 0.99, 3), base[name]) == []
        assert compare(name, None, base[name]) == []
