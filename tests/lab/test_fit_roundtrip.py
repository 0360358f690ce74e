"""`lab fit` against the truth: a load test of a provider whose parameters are drawn at random
and hidden from the fit, fitted, simulated and compared with the recorded run.

The world is built so that every parameter shows in the run: six waves of tasks, each
starting after the provider's bucket has refilled (its burst lets a queue form at the
servers, then the rate meters the rest and answers 429s), the rate between 60 and 80 % of
what the servers can serve, and enough calls that the error rate is known to a few percent.
One recording (about 15 s at time scale 0.25) serves every test here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lab.cli import main
from lab.fit.fitting import fit_trace, fitted_scenario
from lab.fit.world import RunFit
from lab.loadtest.runner import run_loadtest
from lab.scenario import parse_scenario
from lab.simulate.run import run_scenario
from taskfuse.limits.files import load_limits
from taskfuse.trace import TraceWriter

#: The recorded run's time scale. The servers' count is the fragile number: at 0.25 it came
#: out unidentifiable once with two test suites sharing the two cores; at 0.5 in 2 of 3 quiet
#: runs (see the capacity estimator), so 0.25 it stays.
SCALE = 0.25
#: Each wave opens with a burst that queues at the provider: the only calls that show its
#: servers. Six short waves, not three long ones: with three, the calls above the hinge were
#: too few in half the runs and the servers came out not identifiable.
WAVES = 6
DRAW_SEED = 2
#: How far a fitted number may be from the hidden truth, and the simulated run from the real.
FIT_TOLERANCE = 0.15
#: Numbers read off real latencies (the service time's mean and cv, the servers from the
#: latency's hinge) move with the machine's load, which adds real time to real calls: beside
#: two busy loops and other suites the service mean came out +29 to +53 % (+92 % once, +52 %
#: once the harness's measured overhead was taken out) and the servers +14 and +43 %, while
#: the rate, burst and error share stayed within 10 %. So those three are held to
#: FIT_TOLERANCE, and the timing ones to FIT_TOLERANCE widened by LOAD_WIDENING times what the
#: harness measured it added to a call (its mean, as a share of the true service mean): the
#: runs above would have passed with 1.3, and a quiet run is held to about FIT_TOLERANCE.
TIMED = ("servers", "mean", "cv")
LOAD_WIDENING = 2.0
#: Below this harness overhead (as a share of the service mean) a run counts as quiet.
QUIET_LOAD = 0.1
MAKESPAN_TOLERANCE = 0.10
#: A p99 of one run is one draw: the true world simulated with ten seeds gave task p99s from
#: 7.9 to 9.1 s. So the recorded p99 is held to the band the fitted scenario spans over
#: SIM_SEEDS seeds, widened by P99_TOLERANCE (one seed against one recording failed in CI at
#: 7.13 against 9.21, both plausible draws).
SIM_SEEDS = 10
P99_TOLERANCE = 0.15


def hidden_provider(seed: int) -> dict[str, float]:
    """The provider's parameters, drawn with a seeded Generator and never shown to the fit."""
    g = np.random.default_rng(seed)
    servers = int(g.integers(4, 8))
    rate = float(g.uniform(12, 24))
    return {
        "servers": servers,
        "rate": rate,
        "burst": float(round(servers * g.uniform(1.8, 3.0))),
        "mean": float(g.uniform(0.6, 0.8)) * servers / rate,  # utilization 60-80 %
        "cv": float(g.uniform(0.3, 0.6)),
        "error": float(g.uniform(0.2, 0.3)),
    }


def scenario_text(p: dict[str, float]) -> str:
    per_wave = int(p["burst"] + 10 * p["rate"])
    waves = "".join(f"""
  - id: wave{i}
    count: {per_wave}
    arrival: {{kind: closed, start_s: {16 * i}}}
    program:
      - call: {{downstream: partner}}""" for i in range(WAVES))
    return f"""
name: hidden
seed: 4
horizon_s: 900
workers: {int(p["burst"]) + 4}
task_timeout_s: 600
retry: {{max_retry: 0}}
downstreams:
  partner:
    provider:
      rate: {p['rate']:.6g}
      burst: {p['burst']:.6g}
      capacity:
        servers: {p['servers']}
        service: {{dist: lognormal, mean: {p['mean']:.6g}, cv: {p['cv']:.6g}}}
      errors: {{http_503: {p['error']:.6g}}}
    client:
      retry: {{max_retry: 60, backoff: {{kind: exponential, base: 0.1, cap: 0.5, jitter: full}}}}
batches:{waves}
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], Path,
                                                              dict[str, Any]]:
    truth = hidden_provider(DRAW_SEED)
    trace = tmp_path_factory.mktemp("fit") / "hidden.trace"
    report = run_loadtest(parse_scenario(scenario_text(truth)), time_scale=SCALE,
                          trace=trace).report
    return truth, trace, report


@pytest.fixture(scope="module")
def fit(recorded: tuple[dict[str, float], Path, dict[str, Any]]) -> RunFit:
    return fit_trace(recorded[1])


def test_fitted_provider_lands_within_15_percent_of_the_hidden_truth(
    recorded: tuple[dict[str, float], Path, dict[str, Any]], fit: RunFit,
) -> None:
    truth = recorded[0]
    p = fit.providers["partner"]
    assert p.service is not None
    fitted = {"rate": p.rate_limit.rate.value, "burst": p.rate_limit.burst.value,
              "servers": p.capacity.servers.value, "mean": p.service.mean.value,
              "cv": p.service.cv.value, "error": p.errors.rates["http_503"].value}
    assert None not in fitted.values(), f"not identifiable from the run: {fitted}"
    off = {k: abs(fitted[k] / truth[k] - 1) for k in truth}  # type: ignore[operator]
    harness = recorded[2]["loadtest"]["harness"]["calls"]["partner"]
    load = harness["overhead_mean_s"] / truth["mean"]
    band = {k: FIT_TOLERANCE + (LOAD_WIDENING * load if k in TIMED else 0.0) for k in truth}
    assert all(off[k] <= band[k] for k in truth), (truth, fitted, band)
    assert p.outages == []  # error shares: the load does not make errors
    # a slowdown is read off latencies: a busy stretch of the machine looks like one (a
    # 2.2x window of 79 calls beside two busy loops), so only a quiet run must show none
    assert p.slowdowns == [] or load > QUIET_LOAD, (load, p.slowdowns)


def test_simulating_the_fitted_scenario_predicts_the_recorded_run(
    recorded: tuple[dict[str, float], Path, dict[str, Any]], fit: RunFit,
) -> None:
    real = recorded[2]
    doc = yaml.safe_load(fitted_scenario(fit))
    sims = []
    for seed in range(1, SIM_SEEDS + 1):
        doc["seed"] = seed
        sims.append(run_scenario(parse_scenario(yaml.safe_dump(doc))).report)
    for sim in sims:
        # a task fails only after 60 failed calls: a handful either way is the tail of chance
        assert abs(sim["tasks"]["SUCCESS"] - real["tasks"]["SUCCESS"]) <= 0.01 * real["tasks"][
            "submitted"]
        assert sim["makespan_s"] == pytest.approx(real["makespan_s"], rel=MAKESPAN_TOLERANCE)
    assert_within_band(real["run_s"]["p99"], [s["run_s"]["p99"] for s in sims])
    assert_within_band(real["downstreams"]["partner"]["latency_p99_s"],
                       [s["downstreams"]["partner"]["latency_p99_s"] for s in sims])


def assert_within_band(real: float, simulated: list[float]) -> None:
    """The recorded figure lies where the fitted world's seeds put it, give or take a tolerance."""
    low, high = min(simulated) * (1 - P99_TOLERANCE), max(simulated) * (1 + P99_TOLERANCE)
    assert low <= real <= high, (real, sorted(simulated))


def test_lab_fit_writes_a_scenario_and_compare_real_holds_it_to_the_run(
    recorded: tuple[dict[str, float], Path, dict[str, Any]], tmp_path: Path, capsys,
) -> None:
    trace = recorded[1]
    out = tmp_path / "fitted.yaml"
    assert main(["fit", str(trace), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    limits_path = tmp_path / "fitted.limits.yaml"
    assert "rate limit" in text and "servers" in text and str(out) in text
    assert f"limits file written to {limits_path}" in text
    # the world names the limits file beside it; the file holds the limits the run used
    assert "\nlimits: fitted.limits.yaml\n" in out.read_text()
    limits = load_limits(limits_path)
    assert limits.workers == int(recorded[0]["burst"]) + 4
    assert limits.downstreams["partner"].client.retry.max_retry == 60
    scenario = parse_scenario(out.read_text(), str(out))
    assert scenario.limits_source == str(limits_path)
    assert scenario.limits() == limits
    code = main(["compare", "--real", str(trace), str(out), "--json"])
    result = json.loads(capsys.readouterr().out)
    rows = {r["metric"]: r for r in result["metrics"]}
    assert code in (0, 1) and result["time_scale"] == SCALE
    assert abs(rows["makespan_s"]["rel_diff"]) <= MAKESPAN_TOLERANCE
    assert not rows["downstreams.partner.calls"]["flagged"]


def test_the_limits_file_and_the_inline_scenario_are_the_same_scenario(
    recorded: tuple[dict[str, float], Path, dict[str, Any]], tmp_path: Path, capsys,
) -> None:
    """`--inline-limits` keeps one file; `--limits-out` puts the limits anywhere, named by a
    path relative to the scenario. Both read back as the same scenario."""
    trace = recorded[1]
    inline, split = tmp_path / "inline.yaml", tmp_path / "world" / "split.yaml"
    limits_path = tmp_path / "deploy" / "L.yaml"
    assert main(["fit", str(trace), "--out", str(inline), "--inline-limits"]) == 0
    assert f"scenario written to {inline}" in capsys.readouterr().out
    assert main(["fit", str(trace), "--out", str(split), "--limits-out", str(limits_path),
                 "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["scenario"] == str(split) and written["limits"] == str(limits_path)
    assert "limits" not in yaml.safe_load(inline.read_text())
    assert yaml.safe_load(split.read_text())["limits"] == "../deploy/L.yaml"
    assert not (tmp_path / "inline.limits.yaml").exists()
    one = parse_scenario(inline.read_text(), str(inline))
    two = parse_scenario(split.read_text(), str(split))
    assert one.model_dump() == two.model_dump()
    assert main(["fit", str(trace), "--out", str(inline), "--inline-limits", "--limits-out",
                 str(limits_path)]) == 2
    assert main(["fit", str(trace), "--out", str(inline), "--limits-out", str(inline)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "exclude each other" in err


def test_the_fit_report_says_what_the_run_cannot_tell(tmp_path: Path, capsys) -> None:
    sc = parse_scenario(scenario_text(hidden_provider(DRAW_SEED)))
    trace = tmp_path / "tiny.trace"
    # a provider far above the load: no 429, no queue; limits and world otherwise as above
    quiet = sc.model_copy(update={"batches": [sc.batches[0].model_copy(update={"count": 40})]})
    run_loadtest(quiet.model_copy(update={"downstreams": {"partner": sc.downstreams[
        "partner"].model_copy(update={"provider": sc.downstreams["partner"].provider.model_copy(
            update={"rate": 1000.0, "burst": 1000.0, "capacity": None})})}}),
        time_scale=SCALE, trace=trace)
    assert main(["fit", str(trace), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)["downstreams"]["partner"]
    assert "not identifiable" in fitted["rate_limit"]["rate_per_s"]["note"]
    assert "not identifiable" in fitted["capacity"]["servers"]["note"]


@pytest.mark.parametrize("content", [None, b"not a trace", b"TFTRACE1\n"])
def test_bad_traces_are_one_line_and_exit_2(tmp_path: Path, capsys,
                                            content: bytes | None) -> None:
    path = tmp_path / "run.trace"
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "never.yaml"
    assert main(["fit", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err
    assert list(tmp_path.iterdir()) == ([path] if content is not None else [])


def test_compare_real_needs_a_finished_run(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(scenario_text(hidden_provider(DRAW_SEED)))
    trace = tmp_path / "cut.trace"
    TraceWriter(trace, {"source": "loadtest", "series": []}).abort()  # no footer
    assert main(["compare", "--real", str(trace), str(scenario)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not finish" in err


@pytest.mark.parametrize("limits", ["a string", ["workers"], {"workers": 0},
                                    {"pools": {"p": 3}}, {"batches": [1]}])
def test_damaged_recorded_limits_are_not_used_and_the_fit_says_so(tmp_path: Path, capsys,
                                                                   limits: Any) -> None:
    trace = tmp_path / "odd.trace"
    writer = TraceWriter(trace, {"source": "runtime", "series": [],
                                 "meta": {"workers": 2, "limits": limits}})
    writer.event((0.0, "submit", "t0", "b", "x", None, "PENDING", None, 1, None, None, None))
    writer.close({"sim_time_s": 1.0})
    out = tmp_path / "fitted.yaml"
    assert main(["fit", str(trace), "--out", str(out)]) == 0
    assert "do not validate" in capsys.readouterr().out
    assert load_limits(tmp_path / "fitted.limits.yaml").workers == 2


def test_a_runtime_trace_without_limits_is_fitted_with_defaults_said_so(tmp_path: Path,
                                                                      capsys) -> None:
    """`taskfuse worker --trace` writes no limits and no DB steps: the world is still fitted
    from its calls and moves, and the scenario says where its limits came from."""
    trace = tmp_path / "worker.trace"
    writer = TraceWriter(trace, {"source": "runtime", "series": [],
                                 "meta": {"downstreams": ["api"], "workers": 4}})
    rng = np.random.default_rng(12)
    for i in range(200):
        task, start = f"t{i}", i * 0.05
        writer.event((start, "submit", task, "sync", "x", None, "PENDING", None, 1, None,
                      None, None))
        writer.event((start, "move", task, "sync", None, "PENDING", "RUNNING", "claim", 1,
                      "w1", None, None))
        latency = float(rng.lognormal(np.log(0.08), 0.3))
        writer.event((start + 0.0005 + latency, "call", task, "sync", None, None, None, "ok", 1,
                      None, "api", latency))
        writer.event((start + 0.001 + latency + 0.1, "move", task, "sync", None, "RUNNING",
                      "SUCCESS", "ok", 1, "w1", None, None))
    writer.close({"sim_time_s": 10.5})
    out = tmp_path / "fitted.yaml"
    assert main(["fit", str(trace), "--out", str(out)]) == 0
    assert "does not record the run's limits" in capsys.readouterr().out
    scenario = parse_scenario(out.read_text(), str(out))
    assert scenario.workers == 4 and scenario.batches[0].arrival.kind == "poisson"
    assert load_limits(tmp_path / "fitted.limits.yaml").workers == 4
    assert "does not record its limits" in (tmp_path / "fitted.limits.yaml").read_text()
    latency = scenario.downstreams["api"].provider.latency
    assert latency.mean == pytest.approx(0.08 * np.exp(0.045), rel=0.1)
    assert [type(s).__name__ for s in scenario.batches[0].program] == ["CallStep", "WorkStep"]
