"""Helpers for lab tests: scenarios written inline as YAML and run in-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lab.scenario import parse_scenario
from lab.simulate.run import RunResult, run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def simulate(yaml_text: str, trace: Path | None = None, seed: int | None = None,
             overrides: list[str] | None = None) -> RunResult:
    scenario = parse_scenario(textwrap.dedent(yaml_text), "<test>", overrides)
    return run_scenario(scenario, seed, trace)


@pytest.fixture
def sim():
    return simulate
