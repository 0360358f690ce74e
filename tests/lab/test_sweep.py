"""`lab sweep`: axes and ranges, path checks, statistics, the files, interrupt and resume,
and the executors giving the same answer."""

from __future__ import annotations

import csv
import json
import math

import pytest

import lab.sizing.sweep as sweep_mod
from lab.cli import main
from lab.scenario import ScenarioError
from lab.sizing.executors import DaskExecutor, ProcessExecutor, SerialExecutor, make_executor
from lab.sizing.sweep import (
    Evaluator,
    Job,
    Plan,
    RunStore,
    override,
    parse_range,
    parse_values,
    parse_vary,
    run_sweep,
    stat,
)

from .conftest import ROOT

TINY = ROOT / "tests" / "lab" / "scenarios" / "tiny.yaml"
REAL_RUN = sweep_mod.run_job
METRICS = ["makespan_s", "business.p99_s"]


def tiny_plan(vary: list[str], seeds: int = 2, overrides: tuple[str, ...] = ()) -> Plan:
    return Plan.from_file(TINY, list(overrides), vary, seeds=seeds)


# -- axes ----------------------------------------------------------------------------------


def test_ranges_include_both_ends_and_lists_keep_their_order() -> None:
    assert parse_range("5..50:5", "t") == list(range(5, 55, 5))
    assert parse_range("3..6", "t") == [3, 4, 5, 6]
    assert parse_range("0.5..1:0.25", "t") == [0.5, 0.75, 1.0]
    assert parse_range("0.1..0.3:0.1", "t") == [0.1, 0.2, 0.3]  # no float drift past the end
    assert parse_range("50..10:-20", "t") == [50, 30, 10]
    assert parse_values("10,20,50", "t") == [10, 20, 50]
    assert parse_values("shared, batch", "t") == ["shared", "batch"]
    assert parse_values("{rate: 90, burst: 10},null", "t") == [{"rate": 90, "burst": 10}, None]
    assert parse_vary("workers=5..15:5").values == (5, 10, 15)


@pytest.mark.parametrize(("text", "says"), [
    ("workers=50..5:5", "has no values"),
    ("workers=5..50:0", "step"),
    ("workers=a..5", "not a number"),
    ("workers", "expected key.path=LIST"),
    ("workers=", "expected key.path=LIST"),
    ("workers=1,,2", "empty value"),
    ("bad key=1", "not a key path"),
])
def test_bad_axes_are_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_vary(text)


@pytest.mark.parametrize(("vary", "says"), [
    ("workerz=1,2", "workerz: no such key"),
    ("pools.shrd.size=1,2", "pools.shrd: no such entry .*shared"),
    ("batches.nope.count=1,2", "no list item 'nope'"),
    ("workers.size=1,2", "workers is a value"),
    ("workers=0,5", "value 0: .*greater than or equal to 1"),
    ("downstreams.partner.client.bulkhead=3,x", "value 'x'"),
])
def test_paths_must_exist_and_values_must_validate(vary: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        tiny_plan([vary])


def test_unset_and_free_form_keys_can_be_varied() -> None:
    plan = tiny_plan(["downstreams.partner.client.bulkhead=2,4",
                      "downstreams.partner.provider.errors.http_503=0,0.1",
                      "batches.skus.count=10"])
    assert plan.baseline == (None, None, 50)
    assert plan.size() == 4
    assert plan.job(plan.points()[0], 1).overrides[-1] == "batches.skus.count=10"


def test_overrides_round_trip_any_value() -> None:
    assert override("a", "batch") == "a=batch"
    assert override("a", "true") == 'a="true"'  # YAML would read a bare true as a bool
    assert override("a", {"rate": 9}) == 'a={"rate": 9}'


def test_a_second_axis_on_the_same_key_is_refused() -> None:
    with pytest.raises(ScenarioError, match="varied twice"):
        tiny_plan(["workers=1,2", "workers=3"])


# -- statistics ----------------------------------------------------------------------------


def test_confidence_interval_is_student_t_over_seeds() -> None:
    s = stat([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and (s.lo, s.hi, s.n) == (1.0, 3.0, 3)
    assert s.half == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    one = stat([5.0, math.nan])
    assert one.n == 1 and one.mean == 5.0 and math.isnan(one.half)
    assert math.isnan(stat([math.nan]).mean)


# -- running and the files -----------------------------------------------------------------


class Counting:
    """A runner that counts its calls and, when asked, is interrupted after k of them."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.calls = 0
        self.interrupt_after = interrupt_after

    def __call__(self, job: Job) -> dict:
        if self.interrupt_after is not None and self.calls >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls += 1
        return REAL_RUN(job)


def test_sweep_files_hold_every_point_and_seed(tmp_path) -> None:
    plan = tiny_plan(["workers=2,4", "pools.shared.size=1..3"])
    store = RunStore(plan, METRICS, tmp_path / "out")
    rows = run_sweep(plan, Evaluator(plan, store, SerialExecutor()), METRICS)
    assert [r.point for r in rows] == [(w, p) for w in (2, 4) for p in (1, 2, 3)]
    assert all(r.stats["makespan_s"].n == 2 for r in rows)
    lines = list(csv.reader((tmp_path / "out.csv").open()))
    assert lines[0] == ["workers", "pools.shared.size", "seed", *METRICS]
    assert len(lines) == 1 + 6 * 2
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["axes"] == ["workers", "pools.shared.size"] and len(doc["runs"]) == 12
    first = doc["runs"][0]
    assert first["values"] == {"workers": 2, "pools.shared.size": 1} and first["seed"] == 1
    assert first["metrics"]["makespan_s"] == first["report"]["makespan_s"]


def test_interrupted_sweep_keeps_finished_runs_and_resumes(tmp_path) -> None:
    plan = tiny_plan(["workers=1..4"])  # 4 points x 2 seeds = 8 runs
    prefix = tmp_path / "sweep"
    broken = Counting(interrupt_after=3)
    store = RunStore(plan, METRICS, prefix)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, Evaluator(plan, store, SerialExecutor(), runner=broken), METRICS)
    kept = json.loads((prefix.with_suffix(".json")).read_text())["runs"]
    assert len(kept) == 3

    resumed = Counting()
    store = RunStore(plan, METRICS, prefix)
    assert store.resumed == 3
    rows = run_sweep(plan, Evaluator(plan, store, SerialExecutor(), runner=resumed), METRICS)
    assert resumed.calls == 5

    fresh = RunStore(plan, METRICS, tmp_path / "fresh")
    again = run_sweep(plan, Evaluator(plan, fresh, SerialExecutor()), METRICS)
    assert rows == again
    assert prefix.with_suffix(".csv").read_text() == (tmp_path / "fresh.csv").read_text()


def test_ctrl_c_on_the_command_line_says_how_to_resume(tmp_path, monkeypatch, capsys) -> None:
    argv = ["sweep", str(TINY), "--vary", "workers=1..3", "--jobs", "1", "--progress",
            "never", "--out", str(tmp_path / "s")]
    monkeypatch.setattr(sweep_mod, "run_job", Counting(interrupt_after=2))
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "2 runs are in" in err and "rerun the same command to resume" in err
    monkeypatch.undo()
    counting = Counting()
    monkeypatch.setattr(sweep_mod, "run_job", counting)
    assert main(argv) == 0
    assert counting.calls == 1
    out = capsys.readouterr().out
    assert "workers" in out and "makespan_s" in out and "3 points x 1 seed" in out


def test_mapping_values_are_points_too(tmp_path, capsys) -> None:
    argv = ["sweep", str(TINY), "--vary", "downstreams.partner.client.rate_limit={rate: 10},"
            "null", "--vary", "workers=2,4", "--jobs", "1", "--metric", "makespan_s",
            "--out", str(tmp_path / "m")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '{"rate": 10}' in out and "null" in out and "4 points x 1 seed (1)" in out
    runs = json.loads((tmp_path / "m.json").read_text())["runs"]
    assert {json.dumps(r["values"]["downstreams.partner.client.rate_limit"]) for r in runs} \
        == {'{"rate": 10}', "null"}


def test_resuming_a_different_sweep_into_the_same_files_is_refused(tmp_path, capsys) -> None:
    out = str(tmp_path / "s")
    base = ["sweep", str(TINY), "--jobs", "1", "--progress", "never", "--out", out]
    assert main([*base, "--vary", "workers=1,2"]) == 0
    capsys.readouterr()
    assert main([*base, "--vary", "workers=1,2", "--set", "pools.shared.size=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds a different sweep" in err


def test_the_table_shows_mean_and_interval_of_chosen_metrics(capsys) -> None:
    argv = ["sweep", str(TINY), "--vary", "workers=2,4", "--seeds", "3", "--jobs", "1",
            "--metric", "downstreams.partner.rejected_429", "--metric", "throughput"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0].split()
    assert head == ["workers", "downstreams.partner.rejected_429", "throughput_per_s"]
    assert "±" in out and "3 seeds (1..3)" in out


@pytest.mark.parametrize(("extra", "says"), [
    (["--vary", "pools.nope.size=1,2"], "pools.nope: no such entry"),
    (["--vary", "workers=9..1"], "has no values"),
    (["--vary", "workers=1,2", "--metric", "business.p98_s"], "no key 'business.p98_s'"),
    (["--vary", "workers=1,2", "--metric", "business"], "is not a number"),
    (["--vary", "workers=1,2", "--seeds", "0"], "argument --seeds: expected a whole number"),
    (["--vary", "workers=1,2", "--jobs", "0"], "argument --jobs: expected a whole number"),
    (["--vary", "workers=1,2", "--scheduler", "tcp://x:1"], "--scheduler is for"),
])
def test_bad_input_is_one_line_and_exit_2(extra: list[str], says: str, capsys) -> None:
    assert main(["sweep", str(TINY), "--progress", "never", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab") and "\n" not in err and says in err


# -- executors -----------------------------------------------------------------------------


def _files_with(executor, tmp_path, name: str) -> str:
    plan = tiny_plan(["workers=1..3"])
    store = RunStore(plan, METRICS, tmp_path / name)
    try:
        run_sweep(plan, Evaluator(plan, store, executor), METRICS)
    finally:
        executor.close()
    return (tmp_path / f"{name}.json").read_text()


def test_local_processes_give_the_same_files_as_one_process(tmp_path) -> None:
    assert isinstance(make_executor("local", 2), ProcessExecutor)
    assert isinstance(make_executor("local", 1), SerialExecutor)
    serial = _files_with(SerialExecutor(), tmp_path, "serial")
    assert _files_with(ProcessExecutor(2), tmp_path, "procs") == serial


def test_a_dask_cluster_gives_the_same_files_as_one_process(tmp_path) -> None:
    import distributed

    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        executor = DaskExecutor(jobs=2, address=cluster.scheduler_address)
        dask = _files_with(executor, tmp_path, "dask")
    assert dask == _files_with(SerialExecutor(), tmp_path, "serial")
