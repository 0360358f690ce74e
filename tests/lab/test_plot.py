"""Pictures: a recorded run, two runs one above the other, `simulate --plot`, sweep charts,
and one clear line when matplotlib or the trace is missing."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from lab.cli import main
from lab.run import run_scenario
from lab.scenario import load_scenario

from .conftest import ROOT, SCENARIOS

TINY = ROOT / "tests" / "lab" / "scenarios" / "tiny.yaml"
SMALL = ["batches.skus.count=300"]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header: enough to tell one run from two stacked."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("traces")
    out = {}
    for name in ("incident", "incident-fixed"):
        path = where / f"{name}.trace"
        run_scenario(load_scenario(SCENARIOS / f"{name}.yaml", SMALL), None, path)
        out[name] = path
    return out


def test_a_run_is_drawn_on_one_shared_time_axis(traces, tmp_path) -> None:
    out = tmp_path / "incident.png"
    assert main(["plot", str(traces["incident"]), "-o", str(out)]) == 0
    width, height = png_size(out)
    assert width > 1000 and height > 800 and out.stat().st_size > 30_000


def test_two_runs_are_drawn_one_above_the_other(traces, tmp_path) -> None:
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    assert main(["plot", str(traces["incident"]), "-o", str(one)]) == 0
    assert main(["plot", str(traces["incident"]), "--vs", str(traces["incident-fixed"]),
                 "-o", str(two)]) == 0
    assert png_size(two)[0] == png_size(one)[0]
    assert png_size(two)[1] > 1.8 * png_size(one)[1]


def test_simulate_plot_draws_even_without_a_trace_and_leaves_none(tmp_path, monkeypatch,
                                                                  capsys) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["simulate", str(SCENARIOS / "incident-fixed.yaml"), "--set", SMALL[0],
                 "--no-trace", "--plot", "run.png"])
    assert code == 0
    assert png_size(tmp_path / "run.png")[1] > 800
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.png"]
    assert "picture run.png" in capsys.readouterr().err


@pytest.mark.parametrize("vary", [["workers=2,4,8"], ["workers=2,4", "pools.shared.size=1,2"],
                                  ["workers=2,4", "pools.shared.size=1,2", "claim_batch=1,2"]])
def test_sweep_plot_is_a_line_chart_or_a_heatmap(vary: list[str], tmp_path) -> None:
    out = tmp_path / "sweep.png"
    argv = ["sweep", str(TINY), "--jobs", "1", "--progress", "never", "--plot", str(out),
            "--metric", "makespan_s", "--metric", "business.p99_s"]
    for v in vary:
        argv += ["--vary", v]
    assert main(argv) == 0
    assert png_size(out)[0] > 1000


def test_a_real_runs_trace_with_fewer_series_is_drawn_too(tmp_path) -> None:
    from taskfuse.runtime.tracing import series_names
    from taskfuse.trace import TraceWriter

    names = series_names(["partner"])
    header = {"source": "runtime", "scenario": None, "seed": None, "series": names,
              "sample_interval_s": 1.0, "meta": {"downstreams": ["partner"], "pools": [],
                                                 "batches": [], "workers": 4, "slo": {}}}
    writer = TraceWriter(tmp_path / "real.trace", header)
    for t in range(30):
        writer.sample(float(t), [float(t % 7 if n != "ds.partner.breaker" else (t > 20) * 2)
                                 for n in names])
    writer.close({"tasks": {"SUCCESS": 3}})
    out = tmp_path / "real.png"
    assert main(["plot", str(tmp_path / "real.trace"), "-o", str(out)]) == 0
    assert png_size(out)[1] > 400


def test_missing_matplotlib_is_one_line_exit_2_before_any_run(traces, tmp_path, monkeypatch,
                                                               capsys) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    assert main(["plot", str(traces["incident"]), "-o", str(tmp_path / "x.png")]) == 2
    assert main(["simulate", str(TINY), "--no-trace", "--plot", str(tmp_path / "y.png")]) == 2
    assert main(["sweep", str(TINY), "--vary", "workers=1,2", "--jobs", "1",
                 "--plot", str(tmp_path / "z.png")]) == 2
    err = capsys.readouterr()
    lines = err.err.strip().splitlines()
    assert lines == ["lab: plotting needs matplotlib: pip install 'taskfuse[plot]'"] * 3
    assert err.out == ""


def test_a_missing_or_bad_trace_is_one_line_exit_2(tmp_path, capsys) -> None:
    junk = tmp_path / "junk.trace"
    junk.write_text("not a trace")
    assert main(["plot", str(tmp_path / "nope.trace"), "-o", str(tmp_path / "a.png")]) == 2
    assert main(["plot", str(junk), "-o", str(tmp_path / "b.png")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "no such trace file" in lines[0] and "not a taskfuse trace" in \
        lines[1]
