"""The lab held to the minimal hand-written model of the incident (benchmarks/).

Both draw from the same seeded streams in the same order, so on the same parameters they
must agree exactly: same makespan, same calls, same business latencies, seed by seed. The
gateway breaker is off here because the minimal model has none.
"""

from __future__ import annotations

import pytest

from benchmarks.minimal_incident import MinimalIncident
from lab.scenario import load_scenario
from lab.simulate.run import run_scenario

from .conftest import SCENARIOS


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_lab_and_minimal_model_agree_exactly(seed: int) -> None:
    sc = load_scenario(SCENARIOS / "incident.yaml",
                       ["business.breaker=null", "batches.skus.count=1500"])
    minimal = MinimalIncident(sc, seed).run()
    run = run_scenario(sc, seed)
    sim, report = run.simulation, run.report
    partner = report["downstreams"]["partner"]
    assert sim.ended_at == minimal.makespan_s
    assert (partner["calls"], partner["ok"], partner["rejected_429"], partner["timeouts"]) == (
        minimal.calls, minimal.ok_calls, minimal.r429, minimal.timeouts)
    assert sim.business.latencies == minimal.business_latencies
    assert sim.business.timeouts == minimal.business_timeouts
    assert sim.pools["shared"].waits == minimal.pool_waits
    ended = sorted(r.finished_at for r in sim.task_records())
    assert ended == minimal.finished
    # the lab adds only its periodic processes (watchdog, sweeper, sampler) as simpy events
    assert 0 <= report["events"] - minimal.events <= 3 * report["makespan_s"] + 60
