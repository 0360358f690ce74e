"""Whole simulations: determinism, SLO exit codes, the report's shape, faults, DAGs, caps,
breakers, duplicates and the trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.cli import main
from taskfuse.trace import TraceError, read_trace

from .conftest import SCENARIOS, simulate

JSON_KEYS = {
    "scenario", "seed", "makespan_s", "sim_time_s", "wall_s", "events", "tasks", "attempts",
    "retries", "wait_s", "run_s", "downstreams", "pools", "business", "alerts", "slo",
}


def test_same_file_and_seed_give_byte_identical_report_and_trace(tmp_path, capsys) -> None:
    a, b, c = tmp_path / "a.trace", tmp_path / "b.trace", tmp_path / "c.trace"
    incident = str(SCENARIOS / "incident.yaml")
    assert main(["simulate", incident, "--trace", str(a)]) == 1
    first = capsys.readouterr().out
    assert main(["simulate", incident, "--trace", str(b)]) == 1
    assert capsys.readouterr().out == first
    assert a.read_bytes() == b.read_bytes()
    main(["simulate", incident, "--trace", str(c), "--seed", "8"])
    assert capsys.readouterr().out != first
    assert c.read_bytes() != a.read_bytes()


def test_incident_breaks_its_slo_and_the_fix_keeps_it(capsys) -> None:
    assert main(["simulate", str(SCENARIOS / "incident.yaml"), "--json", "--no-trace"]) == 1
    incident = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(SCENARIOS / "incident-fixed.yaml"), "--json",
                 "--no-trace"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert set(incident) >= JSON_KEYS and set(fixed) >= JSON_KEYS
    biz = incident["business"]
    assert biz["p99_s"] >= 1.0 and biz["timeouts"] > 0 and biz["breaker_opens"] > 0
    assert not incident["slo"]["ok"] and incident["slo"]["violations"]
    assert fixed["business"]["p99_s"] < 0.06 and fixed["business"]["timeouts"] == 0
    assert fixed["makespan_s"] > incident["makespan_s"]
    assert fixed["downstreams"]["partner"]["rule_of_thumb_limit"] == 14
    assert fixed["downstreams"]["partner"]["max_in_flight"] <= 14
    assert set(incident["tasks"]) >= {"SUCCESS", "FAILED", "TIMEOUT", "CANCELED", "PENDING",
                                      "RUNNING", "submitted"}
    assert set(incident["wait_s"]) == {"mean", "p50", "p99"}
    assert set(incident["pools"]["shared"]) >= {"size", "max_in_use", "wait_mean_s",
                                                "wait_p99_s"}


def test_seed_demo_states_and_its_timeout_variant() -> None:
    demo = (SCENARIOS / "seed-demo.yaml").read_text()
    assert simulate(demo).report["tasks"]["SUCCESS"] == 12
    tasks = simulate(demo, overrides=["batches.short.program.0.work=3"]).report["tasks"]
    assert (tasks["SUCCESS"], tasks["TIMEOUT"]) == (8, 4)


def test_a_crashed_worker_leaves_its_task_to_the_watchdog() -> None:
    run = simulate("""
    workers: 2
    task_timeout_s: 5
    watchdog_interval_s: 0.5
    retry: {max_retry: 1, backoff: {kind: none}}
    faults: [{kind: worker_crash, at_s: 1, workers: 1}]
    batches:
      - id: b
        count: 4
        program: [{work: 2.0}]
    """)
    r = run.report
    assert r["workers_crashed"] == 1
    assert r["tasks"]["SUCCESS"] == 4  # the orphan timed out at 5 s and was retried
    assert r["retries"] == 1 and r["attempts"] == 5
    history = [r for r in run.simulation.task_records() if r.retry_count]
    assert [r.error_kind for r in history] == ["timeout"]


def test_dag_children_wait_for_their_parent_and_die_with_it() -> None:
    text = """
    workers: 4
    retry: {{max_retry: 0}}
    downstreams:
      api: {{provider: {{latency: 0.1, errors: {{bad_params: {p}}}}}}}
    batches:
      - id: sku
        count: 3
        program: [{{call: {{downstream: api}}}}]
        children:
          - kind: image
            count: 2
            program: [{{work: 0.5}}]
    """
    ok = simulate(text.format(p=0.0))
    assert ok.report["tasks"]["SUCCESS"] == 9
    records = {r.task_id: r for r in ok.simulation.task_records()}
    children = [r for r in records.values() if r.kind == "image"]
    assert len(children) == 6
    for child in children:
        assert child.started_at >= records[child.depends_on[0]].finished_at
    bad = simulate(text.format(p=1.0)).report["tasks"]
    assert (bad["FAILED"], bad["CANCELED"]) == (3, 6)


def test_batch_cap_bounds_running_tasks(tmp_path) -> None:
    trace = tmp_path / "cap.trace"
    simulate("""
    workers: 10
    batches:
      - {id: capped, count: 30, cap: 3, program: [{work: 1.0}]}
      - {id: free, count: 30, program: [{work: 1.0}]}
    """, trace=trace)
    tr = read_trace(trace)
    assert np.nanmax(tr.series("batch.capped.RUNNING")[1]) == 3
    assert np.nanmax(tr.series("batch.free.RUNNING")[1]) >= 7


BREAKER = """
workers: 5
retry: {max_retry: 1, backoff: {kind: fixed, base: 0.1, jitter: none}}
downstreams:
  api:
    provider:
      latency: 0.05
      outages: [{start_s: 0, end_s: 3, mode: error, error: http_503}]
    client:
      breaker: {failure_rate: 0.5, window_size: 4, minimum_calls: 4, open_wait_s: 2,
                half_open_probes: 1}
batches:
  - {id: b, count: 40, program: [{call: {downstream: api}}]}
"""


def test_an_open_breaker_holds_tasks_pending_instead_of_burning_attempts(tmp_path) -> None:
    trace = tmp_path / "b.trace"
    guarded = simulate(BREAKER, trace=trace).report
    unguarded = simulate(BREAKER, overrides=["downstreams.api.client.breaker=null"]).report
    assert unguarded["tasks"]["FAILED"] >= 20  # two attempts each inside the outage
    assert guarded["tasks"]["SUCCESS"] == 40 and guarded["retries"] < 15
    tr = read_trace(trace)
    changes = [(e.t, e.dst) for e in tr.events(kind="breaker")]
    assert changes[0][1] == "open"
    opened, half = changes[0][0], next(t for t, dst in changes if dst == "half_open")
    claims = [e.t for e in tr.events(kind="move") if e.dst == "RUNNING"]
    assert not [t for t in claims if opened < t < half]  # nothing dispatched while open


def test_duplicate_submissions_are_deduplicated() -> None:
    r = simulate("""
    workers: 4
    batches:
      - {id: b, count: 200, duplicates: 0.3, program: [{work: 0.1}]}
    """).report
    assert r["duplicates_submitted"] > 30
    assert r["tasks"]["SUCCESS"] == 200 and r["attempts"] == 200


def test_retry_storm_shows_lockstep_spikes_only_without_jitter() -> None:
    r = simulate((SCENARIOS / "retry-storm.yaml").read_text(),
                 overrides=["batches.no-jitter.count=2000", "batches.full-jitter.count=2000"]
                 ).report
    nojitter, jitter = r["downstreams"]["nojitter"], r["downstreams"]["jitter"]
    assert nojitter["peak_rps_100ms"] > 2 * jitter["peak_rps_100ms"]
    assert nojitter["rejected_429"] > jitter["rejected_429"]


def test_metastable_spike_is_survived_only_with_a_retry_budget(tmp_path) -> None:
    trace = tmp_path / "m.trace"
    simulate((SCENARIOS / "metastable.yaml").read_text(), trace=trace)
    tr = read_trace(trace)

    def successes_between(batch: str, a: float, b: float) -> float:
        t, ok = tr.series(f"batch.{batch}.SUCCESS")
        return float(ok[np.searchsorted(t, b)] - ok[np.searchsorted(t, a)])

    arrived = 30 * 60  # the load after the spike (t = 120..180 s), 30 tasks/s
    assert successes_between("budgeted", 120, 180) > 0.9 * arrived  # recovered
    assert successes_between("naive", 120, 180) < 0.1 * arrived  # still overloaded
    assert successes_between("naive", 0, 55) > 0.9 * 30 * 55  # fine before the spike


def test_a_token_budget_recovers_where_a_ratio_budget_above_capacity_does_not(tmp_path) -> None:
    trace = tmp_path / "b.trace"
    report = simulate((SCENARIOS / "metastable-budgets.yaml").read_text(), trace=trace).report
    ratio, tokens = report["downstreams"]["ratio"], report["downstreams"]["tokens"]
    before_spike = 30 * 60  # first attempts before t = 60 s, all of which succeed
    # The ratio client succeeds only before the spike; its budget keeps paying for retries.
    assert before_spike * 0.95 < ratio["ok"] < before_spike * 1.1
    assert ratio["call_retries"] > 2000 and ratio["timeouts"] > 0.8 * ratio["calls"]
    # The token client stops retrying once its bucket is empty, then serves the rest.
    assert tokens["ok"] > 2 * ratio["ok"] and tokens["call_retries"] < 500

    tr = read_trace(trace)

    def successes_between(batch: str, a: float, b: float) -> float:
        t, ok = tr.series(f"batch.{batch}.SUCCESS")
        return float(ok[np.searchsorted(t, b)] - ok[np.searchsorted(t, a)])

    arrived = 30 * 40  # the load at the end of the run (t = 135..175 s), 30 tasks/s
    assert successes_between("tokens", 135, 175) > 0.9 * arrived  # recovered
    assert successes_between("ratio", 135, 175) < 0.01 * arrived  # still failing
    assert successes_between("ratio", 0, 55) > 0.9 * 30 * 55  # fine before the spike


def test_trace_has_timeline_events_and_the_report(tmp_path) -> None:
    trace = tmp_path / "i.trace"
    run = simulate((SCENARIOS / "incident.yaml").read_text(), trace=trace)
    tr = read_trace(trace)
    assert tr.complete and tr.report == json.loads(json.dumps(run.report))
    t, depth = tr.series("queue_depth")
    assert len(t) == len(depth) > 10 and np.all(np.diff(t) > 0)
    assert depth[0] == 3000 - 50  # 50 workers claimed at t=0
    moves = list(tr.events(kind="move"))
    assert len(moves) == 2 * 3000
    one = list(tr.events(task_id="skus-0"))
    assert [e.kind for e in one][:2] == ["submit", "move"]
    opened = [e for e in tr.events(kind="breaker") if e.subject == "gateway" and e.dst == "open"]
    assert opened  # the gateway fuse blew, and the trace says when


def test_truncated_and_foreign_traces(tmp_path) -> None:
    trace = tmp_path / "t.trace"
    simulate((SCENARIOS / "seed-demo.yaml").read_text(), trace=trace)
    data = trace.read_bytes()
    cut = tmp_path / "cut.trace"
    cut.write_bytes(data[: len(data) - 7])
    partial = read_trace(cut)
    assert not partial.complete and partial.truncated
    junk = tmp_path / "junk.trace"
    junk.write_bytes(b"hello")
    with pytest.raises(TraceError, match="not a taskfuse trace"):
        read_trace(junk)
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "nope.trace")


def test_watch_runs_paced_while_a_follower_reads_the_growing_trace(monkeypatch, capsys,
                                                                    tmp_path) -> None:
    """`lab simulate --watch`: the run is paced and its trace is readable while written.

    The monitor is swapped for a plain follower so the test needs no terminal; the monitor
    itself is tested in tests/tui.
    """
    import time

    import tui.app
    from taskfuse.trace import TraceReader

    seen: list[tuple[bool, int]] = []

    def follower(path: str, follow: bool = False, **_: object) -> int:
        assert follow
        reader = TraceReader(path)
        deadline = time.monotonic() + 30
        while not reader.complete and time.monotonic() < deadline:
            reader.poll()
            seen.append((reader.complete, len(reader.snapshot().times)))
            time.sleep(0.05)
        reader.close()
        return 0

    monkeypatch.setattr(tui.app, "run_watch", follower)
    trace = tmp_path / "w.trace"
    code = main(["simulate", str(SCENARIOS / "seed-demo.yaml"), "--watch", "--speed", "20",
                 "--trace", str(trace)])
    assert code == 0 and "all kept" in capsys.readouterr().out
    assert seen[-1][0] is True  # the follower saw the end
    partial = [n for done, n in seen if not done]
    assert partial and max(partial) > 0  # ... and samples before the end: it was live


def test_a_task_claimed_ahead_runs_from_when_its_worker_takes_it(tmp_path) -> None:
    """One worker holding two tasks at once (claim_batch 2), each 1 s of work, both claimed
    at t=0: the second waits 1 s for the worker, a WAIT for a thread as in the runtime, and
    both run 1 s (its wait is queueing: first waits 0 and 1 s)."""
    trace = tmp_path / "b.trace"
    run = simulate("""
    workers: 1
    claim_batch: 2
    batches:
      - id: b
        count: 2
        program: [{work: 1.0}]
    """, trace=trace)
    r = run.report
    assert r["makespan_s"] == 2.0
    assert (r["run_s"]["p50"], r["run_s"]["p99"]) == (1.0, 1.0)
    assert r["wait_s"]["p99"] == pytest.approx(1.0, abs=0.02)
    waits = [(e.reason, e.subject, e.value) for e in read_trace(trace).events(kind="wait")]
    assert waits == [("thread", "threads", 1.0)]
