"""The lab's async executor: coroutine slots instead of worker threads, a cancel at the
timeout that frees the slot at once, the event loop's lag from CPU, against hand-checked
runs, Erlang C, and itself (same seed, same bytes)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

from lab.cli import main
from taskfuse.core.events import LOOP_WAIT, SLOT_WAIT, EventKind, schema_problems
from taskfuse.trace import read_trace

from .conftest import simulate

TINY = """
name: tiny
horizon_s: 600
workers: 2
async_concurrency: {slots}
task_timeout_s: 60
retry: {{max_retry: 0}}
kinds:
  t: {{executor: {executor}{cap}}}
batches:
  - id: b
    kind: t
    count: {count}
    program:
      - {step}: {seconds}
"""


def tiny(executor: str = "async", slots: int = 3, cap: int | None = None, count: int = 7,
         step: str = "work", seconds: float = 1.0, trace=None):
    text = TINY.format(executor=executor, slots=slots, count=count, step=step, seconds=seconds,
                       cap="" if cap is None else f", async_concurrency: {cap}")
    return simulate(text, trace=trace)


def waits(trace, reason: str) -> list[float]:
    return sorted(e.value for e in read_trace(trace).events(EventKind.WAIT)
                  if e.reason == reason)


def test_coroutines_are_bounded_by_async_concurrency_not_by_workers(tmp_path) -> None:
    """7 one-second tasks on 3 slots: 3 start at 0, 3 at 1, 1 at 2 (2 worker threads would
    take 4 s). The loop's claimer claims only what has a slot: the rest wait PENDING, so no
    claimed task waits for a slot."""
    run = tiny(trace=tmp_path / "a.trace")
    r = run.report
    assert r["makespan_s"] == 3.0
    assert r["tasks"]["SUCCESS"] == 7
    assert r["wait_s"]["mean"] == pytest.approx((3 * 1 + 2) / 7, abs=1e-4)
    assert r["run_s"]["p99"] == 1.0  # the wait for a slot is queueing, not run time
    assert r["async"]["peak_in_flight"] == 3 and r["async"]["coroutines"] == 7
    assert waits(tmp_path / "a.trace", SLOT_WAIT) == []
    assert tiny(executor="thread").report["makespan_s"] == 4.0
    assert "async" not in tiny(executor="thread").report


def test_a_kinds_own_cap_bounds_its_coroutines() -> None:
    r = tiny(cap=2).report
    assert r["makespan_s"] == 4.0
    assert r["async"]["peak_in_flight"] == 2 and r["async"]["kinds"] == {"t": 2}


def test_loop_lag_appears_only_with_cpu_steps(tmp_path) -> None:
    """3 coroutines each wanting 0.5 s of CPU at t=0 take turns on the one loop: lags 0, 0.5
    and 1.0 s, done at 1.5 s; on the 2 worker threads CPU is work like any other (the GIL is
    not modelled): done at 1.0 s."""
    run = tiny(count=3, step="cpu", seconds=0.5, trace=tmp_path / "c.trace")
    r = run.report
    assert r["makespan_s"] == 1.5
    assert r["async"]["loop_lag_s"] == {"p50": 0.5, "p99": 1.0, "max": 1.0}
    assert r["async"]["loop_busy_share"] == 1.0
    assert waits(tmp_path / "c.trace", LOOP_WAIT) == [0.5, 1.0]
    assert tiny(count=3, step="cpu", seconds=0.5, executor="thread").report["makespan_s"] == 1.0
    quiet = tiny(count=3, step="work", seconds=0.5, trace=tmp_path / "w.trace").report
    assert quiet["makespan_s"] == 0.5
    assert quiet["async"]["loop_lag_s"] == {"p50": None, "p99": None, "max": None}
    assert waits(tmp_path / "w.trace", LOOP_WAIT) == []


def test_the_simulated_loop_lag_feeds_the_shipped_loop_lag_alert(tmp_path, capsys) -> None:
    """200 coroutines of 0.5 s CPU on 3 slots take turns on the loop for 100 s, each waiting
    about 1 s for it: the lab's loop_lag_high fires after its minute, the trace samples the
    lag, and the shipped Prometheus rule fires on that trace (one rule, both drivers)."""
    from taskfuse.observe.alerts import main as alerts_main

    trace = tmp_path / "lag.trace"
    r = tiny(count=200, step="cpu", seconds=0.5, trace=trace).report
    assert [a["rule"] for a in r["alerts"]] == ["loop_lag_high"]
    tr = read_trace(trace)
    _, lags = tr.series("loop_lag")
    assert max(lags) == pytest.approx(1.0) and lags[-1] == 0.0
    assert alerts_main([str(trace)]) == 0
    assert capsys.readouterr().out.startswith("TaskfuseLoopLagHigh: fired at t=")
    quiet = tmp_path / "quiet.trace"
    assert tiny(count=200, step="work", seconds=0.5, trace=quiet).report["alerts"] == []
    assert set(read_trace(quiet).series("loop_lag")[1]) == {0.0}
    thread = tmp_path / "thread.trace"
    tiny(executor="thread", count=3, trace=thread)
    assert "loop_lag" not in read_trace(thread).series_names


HUNG = """
name: hung
horizon_s: 600
workers: 1
stuck_threads_max: 0
async_concurrency: 1
task_timeout_s: 1
watchdog_interval_s: 5
retry: {{max_retry: 0}}
kinds:
  sync: {{executor: {executor}}}
batches:
  - id: hung
    kind: sync
    count: 1
    program:
      - hang: {{probability: 1.0, duration: 100}}
  - id: ok
    kind: sync
    count: 1
    arrival: {{kind: closed, start_s: 0.5}}
    program:
      - work: 1
"""


def test_a_hung_coroutine_is_cancelled_at_its_timeout_and_frees_its_slot_at_once(
        tmp_path) -> None:
    """One slot: the hung task is cancelled at its deadline (1 s, plus the watchdog's slack)
    and the waiting task starts then. On one thread that cannot be replaced, the same task
    waits out the 100 s hang."""
    run = simulate(HUNG.format(executor="async"), trace=tmp_path / "h.trace")
    r = run.report
    assert r["tasks"]["TIMEOUT"] == 1 and r["tasks"]["SUCCESS"] == 1
    assert r["async"]["cancelled"] == 1
    assert r["makespan_s"] == pytest.approx(2.0, abs=0.01)
    assert r["stuck_workers"]["peak"] == 0
    # submitted at 0.5, claimed and started at the cancel
    assert sorted(run.simulation.stats.first_waits) == pytest.approx([0.0, 0.5], abs=0.01)
    threads = simulate(HUNG.format(executor="thread")).report
    assert threads["makespan_s"] == pytest.approx(101.0, abs=0.01)
    assert threads["stuck_workers"]["peak"] == 1


def test_every_event_of_an_async_run_keeps_the_one_schema(tmp_path) -> None:
    simulate(HUNG.format(executor="async"), trace=tmp_path / "h.trace")
    tiny(count=3, step="cpu", seconds=0.5, trace=tmp_path / "c.trace")
    for name in ("h.trace", "c.trace"):
        for event in read_trace(tmp_path / name).events():
            assert schema_problems(event) == []


MIXED = """
name: mixed
horizon_s: 600
workers: 2
async_concurrency: 4
retry: {max_retry: 0}
kinds:
  io: {executor: async}
batches:
  - {id: a, kind: io, count: 10, program: [{work: 1.0}]}
  - {id: t, kind: sync, count: 4, program: [{work: 1.0}]}
"""


def test_thread_and_async_kinds_share_one_run(tmp_path) -> None:
    """10 async tasks on 4 slots beside 4 thread tasks on 2 threads. Claims do not choose a
    kind: whoever claims a task of the other executor hands it over. A thread that claimed
    an async task while every slot was taken waits with it for a slot (so at most `workers`
    tasks wait in the loop's queue): at t=0 both threads carry a-4 and a-5, at t=1 a-8 and
    a-9; the loop's claimer hands t-2 and t-3 to the threads at 2, busy until 3."""
    r = simulate(MIXED, trace=tmp_path / "m.trace").report
    assert r["tasks"]["SUCCESS"] == 14
    assert r["makespan_s"] == 4.0
    assert r["async"]["coroutines"] == 10 and r["async"]["peak_in_flight"] == 4
    assert waits(tmp_path / "m.trace", SLOT_WAIT) == [1.0] * 4
    assert waits(tmp_path / "m.trace", "thread") == [1.0] * 2


MMC = """
seed: {seed}
horizon_s: 100000
workers: 1
async_concurrency: {c}
watchdog_interval_s: 50
task_timeout_s: 1000
kinds:
  q: {{executor: async}}
batches:
  - id: q
    kind: q
    count: {n}
    arrival: {{kind: poisson, rate: {lam}}}
    program:
      - work: {{dist: exponential, mean: 1.0}}
"""


def _first_waits(executor: str, seed: int, n: int, lam: float = 7.0, c: int = 10
                 ) -> list[float]:
    text = MMC.format(seed=seed, c=c, n=n, lam=lam)
    if executor == "thread":  # c worker threads instead of c coroutine slots
        text = text.replace("executor: async", "executor: thread").replace(
            "workers: 1", f"workers: {c}")
    return simulate(text).simulation.stats.first_waits


def test_many_coroutines_form_an_mmc_queue_with_c_the_async_concurrency() -> None:
    """Poisson arrivals and exponential awaits on c slots: Erlang C's waiting probability
    and mean wait. Three runs of 8,000 tasks: the waiting probability is within 1 %, the
    mean wait about 17 % under (a short run starts empty; c worker threads give the very
    same waits, next test, and test_queueing.py holds them within 10 % over 150,000)."""
    lam, c = 7.0, 10
    found = [w for seed in (1, 2, 3) for w in _first_waits("async", seed, 8000, lam, c)]
    a = lam
    top = a**c / math.factorial(c) / (1 - a / c)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    assert np.mean(np.asarray(found) > 0) == pytest.approx(p_wait, rel=0.02)
    assert np.mean(found) == pytest.approx(p_wait / (c - lam), rel=0.2)


def test_coroutines_that_only_await_wait_as_c_worker_threads_do() -> None:
    """Without CPU, hangs or a cap per kind, c coroutine slots are c workers: the same
    seeded run gives every task the same wait to the last bit."""
    assert _first_waits("async", 4, 3000) == _first_waits("thread", 4, 3000)


def _report(path, *extra: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["simulate", str(path), "--json", *extra])
    report = json.loads(out.getvalue())
    report.pop("wall_s")
    return json.dumps(report, sort_keys=True)


MESSY = """
name: messy
horizon_s: 3600
async_concurrency: 20
task_timeout_s: 2
retry: {max_retry: 1, backoff: {kind: exponential, base: 0.5, cap: 2}}
kinds:
  io: {executor: async}
downstreams:
  partner:
    provider: {latency: {dist: lognormal, mean: 0.2, cv: 0.8}, errors: {http_503: 0.05}}
    client: {timeout_s: 1, bulkhead: 8}
batches:
  - id: b
    kind: io
    count: 400
    arrival: {kind: poisson, rate: 40}
    program:
      - call: {downstream: partner, count: {dist: integers, low: 1, high: 3}}
      - cpu: {dist: exponential, mean: 0.005}
      - hang: {probability: 0.02, duration: 60}
"""


def test_same_seed_same_bytes(tmp_path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(MESSY)
    first = _report(scenario, "--no-trace")
    answer = json.loads(first)["async"]
    assert answer["cancelled"] > 0 and answer["loop_lag_s"]["max"] > 0
    assert _report(scenario, "--no-trace") == first
    assert _report(scenario, "--no-trace", "--seed", "7") != first
    for name in ("1.trace", "2.trace"):
        _report(scenario, "--trace", str(tmp_path / name))
    assert (tmp_path / "1.trace").read_bytes() == (tmp_path / "2.trace").read_bytes()


CHOOSE = """
name: choose
horizon_s: 600
workers: 10
task_timeout_s: 2
watchdog_interval_s: 5
stuck_threads_max: 0
retry: {max_retry: 1, backoff: {kind: none}}
kinds:
  sync: {executor: thread}
batches:
  - id: b
    kind: sync
    count: 40
    program:
      - work: 1
      - hang: {probability: 0.25, duration: 100}
slo: {makespan_s: 20}
"""


def _size(tmp_path, *args: str) -> tuple[int, str, str]:
    scenario = tmp_path / "choose.yaml"
    scenario.write_text(CHOOSE)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["size", str(scenario), "--seeds", "1", "--jobs", "1", "--progress",
                     "never", *args])
    return code, out.getvalue(), err.getvalue()


def test_lab_size_answers_threads_or_async_and_how_many(tmp_path) -> None:
    """A quarter of the tasks hang for 100 s: on threads each hang keeps a worker (none
    replaced), so no worker count finishes in 20 s; as coroutines each is cancelled at 2 s."""
    code, out, _ = _size(tmp_path, "--threads-or-async", "sync", "--vary", "workers=5,10,20",
                         "--vary", "async_concurrency=5,10,20", "--minimize", "makespan_s",
                         "--json", "--write-limits", str(tmp_path / "limits.yaml"))
    assert code == 0
    answer = json.loads(out)
    assert answer["answer"] == "async"
    assert not answer["thread"]["recommended"]["feasible"]
    assert answer["async"]["recommended"]["feasible"]
    assert answer["async"]["recommended"]["values"] == {"async_concurrency": 20}
    assert "kinds.sync.executor=async" in answer["async"]["apply"]
    written = (tmp_path / "limits.yaml").read_text()
    assert "executor: async" in written and "async_concurrency: 20" in written


def test_lab_size_threads_or_async_needs_a_count_for_each_side(tmp_path) -> None:
    code, _, err = _size(tmp_path, "--threads-or-async", "sync", "--vary", "workers=5,10",
                         "--minimize", "makespan_s")
    assert code == 2
    assert err == "lab: --threads-or-async: give --vary async_concurrency=... (the async " \
                  "side)\n"


def test_coroutines_in_flight_do_not_count_as_running_above_the_workers() -> None:
    """Three coroutines on 2 workers' worth of threads are within the limit: the running
    alert's threshold counts the loop's slots too (workers + async_concurrency)."""
    run = simulate(TINY.format(executor="async", slots=3, count=7, step="work", seconds=1.0,
                               cap="") + "alerts: {running_for_s: 0.5}\n")
    assert run.report["async"]["peak_in_flight"] == 3
    assert run.report["alerts"] == []
