"""CI's regression gate: stable figures against the committed baseline (benchmarks/).

Deterministic counts may not grow, every shipped scenario keeps its exit code and headline
numbers, and the lab stays within its wall-time ratio to the minimal model measured in this
same run. `make baseline` rewrites the baseline on purpose.
"""

from __future__ import annotations

import json

from benchmarks import regression


def test_no_regression_against_the_committed_baseline() -> None:
    base = json.loads(regression.BASELINE.read_text())
    now = regression.measure()
    assert regression.compare(now, base) == []


def test_incident_breaks_and_fix_keeps_their_slos_in_the_baseline() -> None:
    base = json.loads(regression.BASELINE.read_text())["scenarios"]
    assert base["incident.yaml"]["exit"] == 1
    assert base["incident-fixed.yaml"]["exit"] == 0


def test_compare_reports_a_grown_count_and_a_changed_exit_code() -> None:
    base = json.loads(regression.BASELINE.read_text())
    worse = json.loads(json.dumps(base))
    worse["core_calls_per_cycle"] = base["core_calls_per_cycle"] * 1.2
    worse["scenarios"]["incident.yaml"]["exit"] = 0
    problems = regression.compare(worse, base)
    assert any("core calls per claim+complete" in p for p in problems)
    assert any("incident.yaml: lab simulate exits 0" in p for p in problems)


def test_compare_reports_a_fit_round_trip_that_got_worse() -> None:
    base = json.loads(regression.BASELINE.read_text())
    assert set(base["fit_round_trip"]) >= {"incident", "incident-fixed", "retry-storm",
                                           "metastable", "seed-demo"}
    worse = json.loads(json.dumps(base))
    worse["fit_round_trip"]["incident"]["makespan_rel"] = 0.2
    worse["fit_round_trip"]["metastable"]["agree"] -= 3
    problems = regression.compare(worse, base)
    assert any("fit round trip incident: makespan_rel" in p for p in problems)
    assert any("fit round trip metastable" in p and "metrics agree" in p for p in problems)
