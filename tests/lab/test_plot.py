"""Pictures: a recorded run, two runs one above the other, `simulate --plot`, sweep charts,
and one clear line when matplotlib or the trace is missing."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.cli import main
from lab.scenario import load_scenario
from lab.simulate.run import run_scenario

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


def test_an_output_in_no_directory_or_of_another_format_is_one_line_and_writes_nothing(
        traces, tmp_path, capsys) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.png"
    assert main(["plot", str(traces["incident"]), "-o", str(missing)]) == 2
    assert not (tmp_path / "no").exists()  # never created
    assert main(["plot", str(traces["incident"]), "-o", str(tmp_path / "x.gif")]) == 2
    assert main(["plot", str(traces["incident"]), "-o", str(tmp_path / "x")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert "no such directory" in lines[0]
    assert ".gif" in lines[1] and ".png, .svg or .pdf" in lines[1]
    assert "without an extension" in lines[2]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _drawn(fig):
    fig.draw_without_rendering()  # legends and texts get their final places
    return fig


def test_two_runs_keep_their_own_scale_where_one_would_flatten_the_other(traces) -> None:
    from lab.plot.charts import SHARE_RATIO, _load, draw_traces

    runs = [_load(traces["incident"]), _load(traces["incident-fixed"])]
    fig = _drawn(draw_traces(runs))
    per_run = len(fig.axes) // 2
    own = [ax.get_ylabel() for ax in fig.axes if any("own y scale" in t.get_text()
                                                     for t in ax.texts)]
    assert "DB pool\nconnections" in own  # 300 waiters in the incident, none in the fix
    for k in range(per_run):
        top, bottom = fig.axes[k], fig.axes[per_run + k]
        peaks = [max((float(np.nanmax(np.asarray(ln.get_ydata(), float))) for ln in ax.lines
                      if len(ln.get_ydata())), default=0.0) for ax in (top, bottom)]
        if top.get_yscale() == "log" or min(peaks) <= 0:
            continue
        if max(peaks) <= SHARE_RATIO * min(peaks):
            assert top.get_ylim() == bottom.get_ylim()  # alike: one scale, compare by eye
        else:  # the smaller run fills at least half its panel: not drawn flat
            for ax, peak in zip((top, bottom), peaks, strict=True):
                assert peak >= 0.5 * ax.get_ylim()[1], ax.get_ylabel()
                assert any("own y scale" in t.get_text() for t in ax.texts)


def test_legends_stand_beside_their_panel_and_a_full_pool_shows_both_lines(traces) -> None:
    from lab.plot.charts import _load, draw_traces

    fig = _drawn(draw_traces([_load(traces["incident"])]))
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent()
        assert box.x0 >= ax.get_window_extent().x1  # never over a spike
    pools = next(ax for ax in fig.axes if "pool" in ax.get_ylabel())
    by_label = {ln.get_label(): ln for ln in pools.lines}
    size, in_use = by_label["shared size"], by_label["shared in use"]
    assert in_use.get_zorder() > size.get_zorder() and size.get_alpha() < 1
    assert size.get_linewidth() > in_use.get_linewidth()  # the size shows around in use


def test_sweep_bands_of_counts_stay_at_or_above_zero() -> None:
    from types import SimpleNamespace

    from lab.plot.charts import draw_sweep
    from lab.sizing.sweep import Stat

    rows = [SimpleNamespace(point=(w,), stats={"timeouts": Stat(1.0, 3.0, 0.0, 4.0, 3),
                                               "delta": Stat(-1.0, 2.0, -3.0, 1.0, 3)})
            for w in (2, 4, 8)]
    fig = draw_sweep(["workers"], rows, ["timeouts", "delta"])
    counts, delta = fig.axes[0], fig.axes[1]
    band = counts.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() >= 0.0  # mean 1 ± 3, but no run ever saw fewer than 0
    assert delta.collections[0].get_paths()[0].vertices[:, 1].min() == -3.0  # may go below
