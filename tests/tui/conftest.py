"""Fixtures for the monitor's tests: synthetic traces written once per session."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tests.tui.tracegen import Incident, write_incident_trace


@pytest.fixture(scope="session")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    """The incident: 300 tasks, several event frames (so loading happens in steps)."""
    path = tmp_path_factory.mktemp("traces") / "incident.trace"
    return write_incident_trace(path, flush_every=400)


@pytest.fixture(scope="session")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    """The same run with the fix applied: nothing trips."""
    path = tmp_path_factory.mktemp("traces") / "fixed.trace"
    return write_incident_trace(path, healthy=True)


@pytest.fixture(scope="session")
def skus(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    """The incident with the lab's kind of names: tasks `skus-N`, traces `sku-N`."""
    path = tmp_path_factory.mktemp("traces") / "skus.trace"
    return write_incident_trace(path, flush_every=400, task_id="skus-{}", trace_id="sku-{}")


@pytest.fixture
def trace_copy(tmp_path: Path, incident: Incident) -> Path:
    """A private copy of the incident trace that a test may cut or corrupt."""
    dst = tmp_path / "copy.trace"
    dst.write_bytes(incident.path.read_bytes())
    return dst


SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "incident.yaml"


@pytest.fixture(scope="session")
def lab_incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real incident, simulated by the lab."""
    from lab import cli

    path = tmp_path_factory.mktemp("lab") / "incident.trace"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["simulate", str(SCENARIO), "--trace", str(path)])  # exits 1: SLO broken
    assert path.exists(), "lab simulate wrote no trace"
    return path
