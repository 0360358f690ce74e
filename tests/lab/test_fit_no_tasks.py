"""`lab fit --out` on a run without a task: one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

from lab.cli import main
from taskfuse.trace import TraceWriter


def test_a_trace_without_tasks_is_said_in_one_line_and_nothing_is_written(
        tmp_path: Path, capsys) -> None:
    trace = tmp_path / "idle.trace"
    TraceWriter(trace, {"source": "runtime", "series": [], "meta": {"workers": 2}}).close(
        {"sim_time_s": 1.0})
    out = tmp_path / "fitted.yaml"
    assert main(["fit", str(trace), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the run has no task" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idle.trace"]
