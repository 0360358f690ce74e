"""The load test measures itself: call overhead from the provider's own account of its time,
timer lateness, and warnings only where they are a visible share of what they measure."""

from __future__ import annotations

import time

import pytest

from lab.loadtest.connections import CallTimeout, Connections
from lab.loadtest.harness import HarnessStats, warnings
from lab.loadtest.servers import ProviderServers
from lab.scenario import Provider


def test_overhead_and_lateness_in_scenario_seconds_and_warnings_past_their_share() -> None:
    h = HarnessStats()
    for _ in range(100):
        h.call("fast", measured=0.1005, served=0.1)  # 0.5 ms of harness on 100 ms
        h.call("slow", measured=0.0200, served=0.01)  # 10 ms of harness on 20 ms
        h.timer(asked=0.05, slept=0.0501)
    summary = h.summary(scale=0.5)
    fast = summary["calls"]["fast"]
    assert fast["overhead_p50_s"] == pytest.approx(0.001)  # 0.5 ms real at scale 0.5
    assert summary["timers"]["late_p50_s"] == pytest.approx(0.0002)
    notes = warnings(summary)
    assert any(n.startswith("slow: the harness adds") for n in notes)
    assert not any(n.startswith("fast") for n in notes) and not any("timers" in n for n in notes)


def test_timers_that_mostly_wake_on_time_but_whose_tail_is_late_are_warned_of() -> None:
    """A process out of CPU wakes most backoffs on time and some far too late: the median
    says nothing, the p99 does (the metastable run: p50 1.2 ms, p99 355 ms of 100 ms)."""
    h = HarnessStats()
    for i in range(200):
        h.timer(asked=0.1, slept=0.1001 if i % 50 else 0.3)  # 4 of 200 wake 200 ms late
    summary = h.summary(scale=1.0)
    assert summary["timers"]["late_share_of_median"] < 0.05
    assert summary["timers"]["late_p99_share_of_median"] == pytest.approx(2.0, rel=0.01)
    [note] = warnings(summary)
    assert note.startswith("the slowest timers wake 200.0 ms late (p99")


def test_the_provider_says_how_long_it_served_and_the_client_times_out_cleanly() -> None:
    spec = Provider.model_validate({"latency": 0.05})
    hang = Provider.model_validate({"outages": [{"start_s": 0, "end_s": 60, "mode": "hang"}]})
    with ProviderServers({"p": spec, "h": hang}, seed=1) as servers:
        servers.begin(time.time())
        assert servers.pids["p"] != servers.pids["h"]  # a process per provider
        with Connections(servers.url("p")) as conns:
            status, kind, served = conns.get({}, 5.0)
            # the provider's own account: at least its latency, never the client's timeout
            # (its upper side is the machine's load, so it is bounded loosely)
            assert status == 200 and kind is None and 0.05 <= served < 2.0
        with Connections(servers.url("h")) as conns:
            with pytest.raises(CallTimeout):
                conns.get({}, 0.2)
            assert conns._free == []  # a connection that timed out is not reused
        assert servers.stats()["h"]["outage_answers"] == 1
