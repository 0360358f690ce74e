"""A scenario is bounded by the tasks its run creates, not by those it declares (issue 27,
item 11): 1,000,000 tasks arriving at 800/s over a 60 s horizon is a run of about 48k."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.scenario import ScenarioError, load_scenario, task_bound

SCENARIO = """name: big
horizon_s: 60
workers: 50
batches:
  - id: b
    count: 1000000
    arrival: {{kind: {kind}, rate: {rate}}}
    program: [{{work: 0.01}}]
"""


def _file(tmp_path: Path, rate: float, kind: str = "poisson") -> Path:
    path = tmp_path / "big.yaml"
    path.write_text(SCENARIO.format(rate=rate, kind=kind))
    return path


def test_a_horizon_that_ends_the_arrivals_early_bounds_the_run(tmp_path: Path) -> None:
    scenario = load_scenario(_file(tmp_path, 800))
    assert scenario.batches[0].tasks_by(scenario.horizon_s) < 50_000


@pytest.mark.parametrize(("rate", "kind"), [(8000, "poisson"), (800, "closed")])
def test_a_run_that_would_create_too_many_is_refused_and_the_flag_lifts_it(
        tmp_path: Path, rate: float, kind: str) -> None:
    with pytest.raises(ScenarioError, match=r"may create .* tasks by the horizon"):
        load_scenario(_file(tmp_path, rate, kind))
    with task_bound(None):
        assert load_scenario(_file(tmp_path, rate, kind)).batches[0].count == 1_000_000
    with task_bound(2_000_000):
        load_scenario(_file(tmp_path, rate, kind))
