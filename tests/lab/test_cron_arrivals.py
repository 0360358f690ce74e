"""A schedule as an arrival process: the runtime's ticks, in virtual time from an origin."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from lab.model.arrivals import arrivals
from lab.scenario import ScenarioError, parse_scenario
from lab.simulate.run import run_scenario

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
name: cron
horizon_s: {horizon}
workers: 2
batches:
  - id: nightly
    count: {count}
    arrival: {{kind: cron, cron: "{cron}", tz: Europe/Paris,
              origin: "{origin}", per_tick: {per_tick}}}
    program: [{{work: 1}}]
"""


def _scenario(cron: str = "30 2 * * *", origin: str = "2026-03-28T00:00:00+01:00",
              count: int = 6, per_tick: int = 2, horizon: float = 3 * 86_400):
    return parse_scenario(SCENARIO.format(cron=cron, origin=origin, count=count,
                                          per_tick=per_tick, horizon=horizon))


def test_each_tick_brings_its_group_at_the_runtimes_tick_times() -> None:
    sc = _scenario()
    [batch] = sc.batches
    groups = list(arrivals(batch.arrival, batch.count, sc.horizon_s, random.Random(0)))
    # 02:30 on the 28th; on the 29th 02:30 does not exist in Paris (clocks jump to 03:00,
    # one hour later in virtual time than a plain 24 h); 02:30 on the 30th
    assert groups == [(2.5 * 3600, 0, 2), (26 * 3600, 2, 4), (49.5 * 3600, 4, 6)]


def test_the_arrivals_stop_at_the_count_and_at_the_horizon() -> None:
    sc = _scenario(cron="*/10 * * * *", origin="2026-12-01T00:05:00+01:00", count=5,
                   per_tick=2, horizon=1_800)
    [batch] = sc.batches
    groups = list(arrivals(batch.arrival, batch.count, sc.horizon_s, random.Random(0)))
    assert groups == [(300.0, 0, 2), (900.0, 2, 4), (1500.0, 4, 5)]
    short = list(arrivals(batch.arrival, batch.count, 1_000, random.Random(0)))
    assert short == [(300.0, 0, 2), (900.0, 2, 4)]


def test_a_simulated_schedule_runs_each_tick_and_is_reproducible() -> None:
    sc = _scenario(cron="*/10 * * * *", origin="2026-12-01T00:05:00+01:00", count=5,
                   per_tick=2, horizon=3_600)
    first = run_scenario(sc).report
    assert first["tasks"]["SUCCESS"] == 5
    assert first["makespan_s"] == pytest.approx(1_501.0)  # the last tick (1500 s) + 1 s
    assert run_scenario(sc).report == first


@pytest.mark.parametrize(("change", "message"), [
    ({"cron": "30 2 * *"}, "cron expression '30 2 * *': Wrong number of fields"),
    ({"origin": "2026-12-01T00:00:00"}, "needs an offset"),
])
def test_a_bad_cron_arrival_is_one_line(change: dict[str, str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("*", r"\*")):
        _scenario(**change)
    text = SCENARIO.format(cron="0 2 * * *", origin="2026-12-01T00:00:00+01:00", count=1,
                           per_tick=1, horizon=10).replace("tz: Europe/Paris,", "")
    with pytest.raises(ScenarioError, match="a cron arrival needs cron, tz and origin"):
        parse_scenario(text)


def test_a_load_test_at_a_time_scale_runs_the_ticks_as_fast() -> None:
    from lab.loadtest.scale import scale_scenario

    sc = _scenario(cron="*/10 * * * *", origin="2026-12-01T00:05:00+01:00", count=5,
                   per_tick=2, horizon=3_600)
    fast = scale_scenario(sc, 0.1)
    [batch] = fast.batches
    groups = list(arrivals(batch.arrival, batch.count, fast.horizon_s, random.Random(0)))
    assert groups == [(30.0, 0, 2), (90.0, 2, 4), (150.0, 4, 5)]


@pytest.mark.slow
def test_the_shipped_scenario_keeps_its_slo_at_night_and_breaks_it_at_dawn() -> None:
    def simulate(*more: str) -> int:
        return subprocess.run(
            [sys.executable, "-m", "lab.cli", "simulate", "scenarios/nightly-and-day.yaml",
             "--no-trace", *more], cwd=ROOT, capture_output=True, text=True).returncode

    assert simulate() == 0
    assert simulate("--set", "batches.sync.arrival.cron=30 6 * * *") == 1
