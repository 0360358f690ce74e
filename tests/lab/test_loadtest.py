"""Load tests for real: emulated servers, real threads, real pools, held to the simulator.

Real runs are short (a few seconds each) and use time scale 0.2: five times faster than
the scenario, yet every real duration stays at 4 ms or more, well above a thread wake-up.
The agreement tolerance is stated once (TOLERANCE); measured agreement on this scenario is
within 3 % for makespan, calls and 429s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from lab.cli import main
from lab.loadtest.compare import compare_reports, render_comparison
from lab.loadtest.runner import run_loadtest
from lab.loadtest.scale import scale_scenario
from lab.loadtest.servers import ProviderServers
from lab.scenario import Provider, ScenarioError, parse_scenario
from lab.simulate.run import run_scenario
from taskfuse.trace import TraceError, read_trace
from tests.store.backends import PG_URL, need_pg

ROOT = Path(__file__).resolve().parents[2]
#: How far a real run may be from its simulation on the compared counts and makespan.
TOLERANCE = 0.25
SCALE = 0.2
SHARED_SCALE = 1.0

# 300 tasks on 20 workers through a pool of 4 and a partner limited to 20 requests/s:
# demand is well above the limit, so the partner answers 429s that the client retries.
# (With 10 workers demand is only just above the limit and the 429 count becomes a lever on
# every millisecond a task spends elsewhere: a 4 % slower task loop gives 15 % fewer 429s.)
SMALL = """
name: small
seed: 5
horizon_s: 600
workers: 20
task_timeout_s: 30
retry: {max_retry: 2, backoff: {kind: exponential, base: 0.5, cap: 4, jitter: full}}
pools:
  db: {size: 4, acquire_timeout_s: 10}
downstreams:
  partner:
    provider:
      rate: 20
      burst: 5
      reject_latency_s: 0.02
      latency: {dist: lognormal, mean: 0.1, cv: 0.3}
    client:
      timeout_s: 1.0
      retry: {max_retry: 4, backoff: {kind: exponential, base: 0.2, cap: 2, jitter: full}}
batches:
  - id: items
    count: 300
    program:
      - db: {pool: db, query: {dist: lognormal, mean: 0.05, cv: 0.5}}
      - call: {downstream: partner}
      - work: {dist: lognormal, mean: 0.2, cv: 0.5}
"""

# Business traffic sharing a pool of 3 with a batch that holds its connection for the whole
# task: business requests queue behind the batch (the incident, in miniature).
SHARED = """
name: shared
seed: 2
horizon_s: 120
sample_interval_s: 0.5
workers: 5
pools:
  shared: {size: 3, acquire_timeout_s: 10}
downstreams:
  partner:
    provider: {capacity: {servers: 4, service: {dist: lognormal, mean: 0.1, cv: 0.5}}}
    client: {bulkhead: 3, breaker: {failure_rate: 0.5, minimum_calls: 10}}
business:
  pool: shared
  rate: 20
  query: {dist: lognormal, mean: 0.02, cv: 0.4}
  gateway_timeout_s: 1.0
batches:
  - id: sync
    count: 60
    program:
      - db: {pool: shared, query: 0.03, hold: whole_task}
      - call: {downstream: partner}
      - work: 0.1
"""


def scenario(text: str):  # type: ignore[no-untyped-def]
    return parse_scenario(textwrap.dedent(text), "<test>")


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# -- time scaling (pure) -------------------------------------------------------------------


def test_scaling_time_is_a_change_of_unit() -> None:
    sc = scenario(SMALL)
    plain = run_scenario(sc).report
    fast = run_scenario(scale_scenario(sc, 0.1)).report
    assert fast["makespan_s"] == pytest.approx(plain["makespan_s"] * 0.1, rel=1e-3)
    assert fast["tasks"] == plain["tasks"]
    for key in ("calls", "rejected_429", "call_retries"):
        assert fast["downstreams"]["partner"][key] == plain["downstreams"]["partner"][key]


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_scaling_covers_hangs_kinds_and_respawns(executor: str) -> None:
    text = (ROOT / "scenarios" / "hung-tasks.yaml").read_text()
    sc = scenario(text.replace("executor: thread", f"executor: {executor}, timeout_s: 5"))
    plain = run_scenario(sc).report
    fast = scale_scenario(sc, 0.1)
    assert fast.kinds["sync"].timeout_s == pytest.approx(0.5)
    assert fast.process_respawn_s == pytest.approx(0.02)
    report = run_scenario(fast).report
    assert report["makespan_s"] == pytest.approx(plain["makespan_s"] * 0.1, rel=1e-2)
    assert report["stuck_workers"]["peak"] == plain["stuck_workers"]["peak"]
    assert report["workers_killed"] == plain["workers_killed"]


def test_scaling_keeps_counts_and_pins_the_default_burst() -> None:
    sc = scenario(SMALL.replace("burst: 5", "") + "\nbusiness: {pool: db, rate: 5, query: 0.01}")
    fast = scale_scenario(sc, 0.5)
    provider = fast.downstreams["partner"].provider
    assert provider.rate == 40 and provider.burst == 2.0  # the unscaled default, rate / 10
    assert fast.pools["db"].size == 4 and fast.batches[0].count == 300
    assert fast.business is not None and fast.business.rate == 10
    assert fast.horizon_s == 300 and fast.retry.backoff.base == 0.25


def test_scaling_refuses_a_bad_factor() -> None:
    with pytest.raises(ScenarioError, match="time-scale"):
        scale_scenario(scenario(SMALL), 0.0)


# -- the emulated servers ------------------------------------------------------------------


def test_servers_enforce_the_token_bucket_and_both_sides_count_the_same_429s() -> None:
    spec = Provider.model_validate({"rate": 20, "burst": 5, "latency": 0.001})
    with ProviderServers({"p": spec}, seed=1) as servers, httpx.Client(trust_env=False) as http:
        servers.begin(time.time())
        began = time.monotonic()
        codes = [http.get(servers.url("p")).status_code for _ in range(60)]
        elapsed = time.monotonic() - began
        stats = servers.stats()["p"]
    ok, rejected = codes.count(200), codes.count(429)
    assert ok + rejected == 60
    assert ok <= 5 + 20 * elapsed + 1  # never more than burst + rate x time
    assert rejected > 0
    assert stats["requests"] == 60 and stats["rejected_429"] == rejected
    assert stats["served"] == ok


def test_servers_serve_capacity_errors_and_outages() -> None:
    specs = {
        "busy": Provider.model_validate({"capacity": {"servers": 2, "service": 0.1}}),
        "down": Provider.model_validate({"outages": [{"start_s": 0, "end_s": 60,
                                                      "error": "http_503"}]}),
        "flaky": Provider.model_validate({"latency": 0.001, "errors": {"bad_params": 1.0}}),
    }
    with ProviderServers(specs, seed=1) as servers, httpx.Client(trust_env=False) as http:
        servers.begin(time.time())
        down = http.get(servers.url("down"))
        flaky = http.get(servers.url("flaky"))
        began = time.monotonic()
        import concurrent.futures as cf

        with cf.ThreadPoolExecutor(4) as pool:  # 4 requests on 2 servers: two rounds
            list(pool.map(lambda _: http.get(servers.url("busy")), range(4)))
        took = time.monotonic() - began
    assert down.status_code == 503 and down.headers["x-error-kind"] == "http_503"
    assert flaky.status_code == 500 and flaky.headers["x-error-kind"] == "bad_params"
    assert 0.18 < took < 1.0


# -- real runs against their simulation ----------------------------------------------------


def _close(real: float, simulated: float) -> bool:
    return abs(real - simulated) <= TOLERANCE * abs(simulated)


def test_compare_a_small_scenario_agrees_with_its_simulation(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, SMALL)
    code = main(["compare", str(path), "--time-scale", str(SCALE), "--json"])
    out = json.loads(capsys.readouterr().out)
    sim, real = out["simulated"], out["real"]
    assert code in (0, 1)
    assert real["finished"] and real["tasks"]["SUCCESS"] == sim["tasks"]["SUCCESS"] == 300
    assert _close(real["makespan_s"], sim["makespan_s"])
    ps, pr = sim["downstreams"]["partner"], real["downstreams"]["partner"]
    assert _close(pr["calls"], ps["calls"])
    assert _close(pr["rejected_429"], ps["rejected_429"])
    assert pr["ok"] == ps["ok"] == 300
    server = real["loadtest"]["servers"]["partner"]
    assert server["rejected_429"] == pr["rejected_429"]  # counted on both sides
    assert server["requests"] == pr["calls"]
    assert real["loadtest"]["time_scale"] == SCALE
    assert {m["metric"] for m in out["metrics"]} >= {"makespan_s",
                                                     "downstreams.partner.rejected_429"}


def test_business_traffic_on_a_shared_pool_writes_the_same_trace_and_report(
    tmp_path: Path,
) -> None:
    sc = scenario(SHARED)
    sim = run_scenario(sc).report
    trace = tmp_path / "real.trace"
    # In real time: each of the 60 tasks holds the pool, so a busy machine's few
    # milliseconds per task add up along 20 rounds of 3, and at SCALE (5 x faster) they
    # read 5 x longer in scenario time: the makespan came out +26 % beside other work.
    result = run_loadtest(sc, time_scale=SHARED_SCALE, trace=trace)
    real = result.report
    assert set(sim) <= set(real)  # the simulator's report keys, plus `loadtest`
    assert real["finished"] and real["tasks"]["SUCCESS"] == 60
    assert _close(real["makespan_s"], sim["makespan_s"])
    biz_sim, biz_real = sim["business"], real["business"]
    assert _close(biz_real["requests"], biz_sim["requests"])
    assert biz_real["p50_s"] > 0.02  # business requests really queued behind the batch
    assert real["pools"]["shared"]["max_in_use"] == 3
    assert real["downstreams"]["partner"]["max_in_flight"] <= 3  # the bulkhead held
    tr = read_trace(trace)
    assert tr.complete and tr.header["source"] == "loadtest"
    assert tr.header["meta"]["time_scale"] == SHARED_SCALE
    t, in_use = tr.series("pool.shared.in_use")
    assert in_use.max() <= 3 and t[-1] == pytest.approx(real["sim_time_s"], rel=0.1)
    assert set(tr.series_names) == set(read_series_of_simulation(sc, tmp_path))
    assert tr.report is not None and tr.report["makespan_s"] == real["makespan_s"]


def read_series_of_simulation(sc, tmp_path: Path) -> list[str]:  # type: ignore[no-untyped-def]
    run_scenario(sc, trace=tmp_path / "sim.trace")
    return read_trace(tmp_path / "sim.trace").series_names


# One worker, 20 tasks of 0.4 s, a sweep every 0.5 s: the pass at 2.5 s expires what has
# waited more than 2.2 s (the 7th task started at 2.4 s, 0.1 s before the pass: 20 ms at
# the test's time scale).
EXPIRE = """
name: expire
seed: 3
horizon_s: 60
workers: 1
sweeper: {interval_s: 0.5, max_pending_age_s: 2.2}
batches:
  - id: queued
    count: 20
    program:
      - work: 0.4
"""


def test_the_load_tests_sweeper_expires_what_waited_too_long_as_simulated() -> None:
    sc = scenario(EXPIRE)
    sim = run_scenario(sc).report["tasks"]
    real = run_loadtest(sc, time_scale=SCALE).report["tasks"]
    assert sim["CANCELED"] > 10 and sim["SUCCESS"] + sim["CANCELED"] == 20
    assert real["SUCCESS"] + real["CANCELED"] == 20 and real["PENDING"] == 0
    assert abs(real["CANCELED"] - sim["CANCELED"]) <= 2  # a pass may land a task late


def test_postgres_pools_and_store(tmp_path: Path) -> None:
    need_pg()
    sc = scenario(SMALL.replace("count: 300", "count: 40"))
    real = run_loadtest(sc, time_scale=SCALE, store_url=PG_URL).report
    assert real["tasks"]["SUCCESS"] == 40
    assert real["loadtest"]["pools"] == "postgresql"
    assert real["pools"]["db"]["acquires"] >= 40


def test_comparison_flags_only_differences_beyond_tolerance_and_noise() -> None:
    sim = run_scenario(scenario(SMALL)).report
    real = json.loads(json.dumps(sim))
    real["makespan_s"] = sim["makespan_s"] * 1.5
    real["retries"] = sim["retries"] + 3  # a small count: within noise
    rows = {r.metric: r for r in compare_reports(sim, real, 0.25, 0.2)}
    assert rows["makespan_s"].flagged and rows["makespan_s"].rel == pytest.approx(0.5)
    assert not rows["retries"].flagged and not rows["tasks.SUCCESS"].flagged
    text = render_comparison(list(rows.values()), "small", 0.25, 0.2, (0.1, 2.0))
    assert "makespan_s" in text and "beyond tolerance" in text


def test_percentiles_of_times_are_compared_as_times_not_counts() -> None:
    """`run_s.p50` is seconds: 1 s against 2 s is a disagreement, though the difference is
    below the floor of counts (5); 0 against 1 ms of real time is noise."""
    sim = run_scenario(scenario(SMALL)).report
    real = json.loads(json.dumps(sim))
    real["run_s"]["p50"] = 2 * sim["run_s"]["p50"]
    real["wait_s"]["p99"] = sim["wait_s"]["p99"] + 0.001 / 0.2  # 1 ms of real time at 0.2
    rows = {r.metric: r for r in compare_reports(sim, real, 0.25, 0.2)}
    assert 0 < sim["run_s"]["p50"] < 2.5  # below the count floor: only a time floor flags it
    assert rows["run_s.p50"].flagged
    assert not rows["wait_s.p99"].flagged


# -- stopping and bad input ----------------------------------------------------------------


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _samples_written(trace: Path) -> bool:
    try:
        return len(read_trace(trace).times) > 0
    except TraceError:  # not even its header yet
        return False


@pytest.mark.parametrize("moment", ["starting", "running"])
def test_ctrl_c_leaves_no_process_or_port_behind(tmp_path: Path, moment: str) -> None:
    """Interrupted while it starts its parts (right after the servers announce their ports)
    or while it runs (once the trace holds samples). It is started with SIGINT ignored, as
    a background job of a script is: Ctrl-C must work all the same."""
    path = write(tmp_path, SHARED)  # workers, a pool, business traffic and a server
    trace = tmp_path / "run.trace"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.cli", "loadtest", str(path), "--time-scale", "1",
         "--trace", str(trace), "--set", "batches.sync.count=200"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        found = re.search(r"127\.0\.0\.1:(\d+) \(pid (\d+)\)", line)
        assert found, line
        port, child = int(found[1]), int(found[2])
        assert _listening(port)
        end = time.monotonic() + 30
        while moment == "running" and not _samples_written(trace):
            assert proc.poll() is None and time.monotonic() < end, "the run never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        began = time.monotonic()
        _, err = proc.communicate(timeout=20)
        stopped_in = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err and stopped_in < 10
    assert not Path(f"/proc/{child}").exists()
    assert not _listening(port)
    if trace.exists() and trace.stat().st_size:
        assert not read_trace(trace).complete  # no footer: readers see an interrupted run


@pytest.mark.parametrize(("args", "expected"), [
    (["--time-scale", "0"], "--time-scale"),
    (["--store", "redis://somewhere"], "--store"),
    (["--set", "workers=0"], "workers"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, args: list[str],
                                          expected: str) -> None:
    path = write(tmp_path, SMALL)
    assert main(["loadtest", str(path), "--no-trace", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_missing_file_and_bad_tolerance_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["loadtest", str(tmp_path / "nope.yaml")]) == 2
    assert main(["compare", str(write(tmp_path, SMALL)), "--tolerance", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no such scenario file" in err[0]


def test_child_process_runs_only_on_loopback() -> None:
    spec = Provider.model_validate({"latency": 0.001})
    with ProviderServers({"p": spec}, seed=0) as servers:
        assert servers.url("p").startswith("http://127.0.0.1:")
        assert servers.pid is not None and servers.pid != os.getpid()


# -- hung tasks: stuck threads, killed task processes ----------------------------------------

# 12 tasks on 3 threads (one replacement at most); seed 1 makes 3 attempts hang for 30 s,
# far past the 3 s timeout and the whole run (simulated: 3 TIMEOUT, 3 threads stuck).
TINY_HUNG = """
name: tiny-hung
seed: 1
horizon_s: 600
workers: 3
stuck_threads_max: 1
task_timeout_s: 3
watchdog_interval_s: 0.1
retry: {max_retry: 0}
kinds:
  sync: {executor: EXECUTOR}
downstreams:
  partner:
    provider:
      latency: {dist: constant, value: 0.1}
    client: {timeout_s: 1}
batches:
  - id: skus
    kind: sync
    count: 12
    program:
      - call: {downstream: partner, count: 1}
      - hang: {probability: 0.25, duration: 30}
      - work: 0.2
"""


def _hung_run(tmp_path: Path, executor: str) -> tuple[dict, dict]:
    """The simulation and a load test (a fresh interpreter: its fork server is the load
    test's own, with its preloads) of the tiny hung scenario."""
    return _simulated_and_real(write(tmp_path, TINY_HUNG.replace("EXECUTOR", executor)))


def _simulated_and_real(path: Path) -> tuple[dict, dict]:
    """The scenario at `path` simulated, and load tested in a fresh interpreter."""
    simulated = run_scenario(scenario(path.read_text())).report
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "loadtest", str(path), "--time-scale", str(SCALE),
         "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return simulated, json.loads(proc.stdout)


def test_a_load_test_of_hung_threads_reports_them_stuck_and_replaced(tmp_path) -> None:
    simulated, real = _hung_run(tmp_path, "thread")
    assert simulated["tasks"]["TIMEOUT"] == 3 and simulated["stuck_workers"]["peak"] == 3
    assert real["tasks"]["TIMEOUT"] == 3 and real["tasks"]["SUCCESS"] == 9
    stuck = real["stuck_workers"]
    # Three hung threads of three: the pool is empty until one is replaced (the bound).
    assert stuck["peak"] >= 2 and stuck["replaced"] == 1 and stuck["mean"] > 0
    assert real["workers_killed"] == 0
    rows = {r.metric: r for r in compare_reports(simulated, real, TOLERANCE, SCALE)}
    assert rows["stuck_workers.peak"].simulated == 3 and "workers_killed" in rows


def test_a_load_test_of_a_process_kind_kills_the_hung_attempts(tmp_path) -> None:
    simulated, real = _hung_run(tmp_path, "process")
    assert simulated["workers_killed"] == 3
    assert real["tasks"]["TIMEOUT"] == 3 and real["tasks"]["SUCCESS"] == 9
    assert real["workers_killed"] == 3  # the same attempts hang: the simulator's streams
    assert real["stuck_workers"] == {"peak": 0, "mean": 0.0, "replaced": 0, "retired": 0}
    assert real["downstreams"]["partner"]["calls"] == 12  # counted from the runtime's events
    assert real["attempts"] == 12
    assert any("executor: process" in note for note in real["loadtest"]["unsupported"])


TINY_RETRIES = """
name: tiny-retries
seed: 5
horizon_s: 30
workers: 6
retry: {max_retry: 0}
kinds: {sync: {executor: EXECUTOR}}
downstreams:
  partner:
    provider: {latency: {dist: constant, value: 0.05},
               outages: [{start_s: 0, end_s: 30, mode: error, error: http_503}]}
    client: {timeout_s: 1, retry: {max_retry: 3, backoff: {kind: fixed, base: 1.5, jitter: none}}}
batches:
  - {id: skus, kind: sync, count: 6, program: [{call: {downstream: partner, count: 1}}]}
"""


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_load_test_makes_the_clients_retries_on_either_executor(tmp_path, executor) -> None:
    """Every attempt fails (the outage lasts the run), so each of the six calls is tried four
    times and its task fails, in the simulation and in task processes alike (their retries
    counted by the task processes themselves). The outage covers the whole run so the counts
    do not hang on when a busy machine starts the task processes (an outage of 2 s let a late
    start skip a retry)."""
    simulated, real = _simulated_and_real(
        write(tmp_path, TINY_RETRIES.replace("EXECUTOR", executor)))
    want = {"calls": 24, "call_retries": 18}
    for report in (simulated, real):
        got = report["downstreams"]["partner"]
        assert {k: got[k] for k in want} == want, got
        assert report["tasks"]["FAILED"] == 6
    assert not any("retr" in note for note in real["loadtest"]["unsupported"])


def test_a_load_tests_record_carries_the_stuck_bound_and_the_kinds_to_the_fit(tmp_path) -> None:
    """Without them a fitted hung run replaced every stuck thread (the default bound)."""
    from lab.fit.recorded_limits import recorded_limits
    from lab.loadtest.record import limits_meta

    sc = scenario(write(tmp_path, TINY_HUNG.replace("EXECUTOR", "process")).read_text())
    meta = limits_meta(sc)
    assert meta["stuck_threads_max"] == 1
    assert meta["kinds"]["sync"]["executor"] == "process"
    rec = recorded_limits({"limits": meta}, 60.0)
    assert rec.recorded and rec.doc["stuck_threads_max"] == 1
    assert rec.doc["kinds"]["sync"]["executor"] == "process"


# An open loop (`workers: unbounded`: one thread per task in a load test, 4,000 at most) fed
# 20 tasks a second; the horizon ends it after about 50 of its 4,000 tasks.
OPEN_LOOP = """
name: open
seed: 3
horizon_s: 2.5
workers: unbounded
batches:
  - id: feed
    count: 4000
    arrival: {kind: schedule, steps: [{at_s: 0, rate: 20}]}
    program:
      - work: 0.05
"""


def _claimed_at(trace: Path) -> list[float]:
    return sorted(e.t for e in read_trace(trace).events(kind="move")
                  if e.dst is not None and str(e.dst).endswith("RUNNING"))


def test_time_zero_is_when_the_runner_is_up_so_early_arrivals_are_not_one_burst(
        tmp_path: Path) -> None:
    """Starting 4,000 threads takes about a second, and they take a moment more to wait for
    work. The clock used to start before them, so every arrival due meanwhile was submitted
    at once when they were up (36 tasks in one instant of the metastable run, which collapsed
    its naive client from the first second instead of at the surge, as simulated). Now the
    first dozen tasks start when the simulation starts them (it draws the same arrivals),
    give or take the harness: not a second late."""
    sc = scenario(OPEN_LOOP)
    run_scenario(sc, None, tmp_path / "sim.trace")
    run_loadtest(sc, trace=tmp_path / "real.trace")
    simulated, real = _claimed_at(tmp_path / "sim.trace"), _claimed_at(tmp_path / "real.trace")
    assert len(simulated) >= 12 and len(real) >= 12
    late = [round(r - s, 3) for s, r in zip(simulated[:12], real[:12], strict=True)]
    assert max(late) < 0.3, late


def test_the_runtimes_backoff_between_a_calls_attempts_is_among_the_harness_timers() -> None:
    """Every successful task waited out a DB hold and a work step, and every retried call a
    backoff of the runtime's (full jitter: never zero): each is a harness timer, so a process
    short of CPU that wakes backoffs late is reported, not read as the provider's doing."""
    report = run_loadtest(scenario(SMALL), time_scale=SCALE).report
    retries = sum(d["call_retries"] for d in report["downstreams"].values())
    timers = report["loadtest"]["harness"]["timers"]["timers"]
    assert retries > 50
    assert timers >= 2 * report["tasks"]["SUCCESS"] + retries, (timers, retries)
