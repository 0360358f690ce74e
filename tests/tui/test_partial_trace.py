"""A simulation's trace cut anywhere (still being written, or its run killed) replays with a
dashboard: the writer keeps the timeline's samples in step with the event frames."""

from __future__ import annotations

from pathlib import Path

from tui.sources import TraceSource
from tui.trace_model import TraceModel


def test_a_simulation_cut_in_half_has_its_timeline_up_to_the_cut(
        lab_incident: Path, tmp_path: Path) -> None:
    whole = lab_incident.read_bytes()
    cut = tmp_path / "cut.trace"
    cut.write_bytes(whole[: len(whole) // 2])
    src = TraceSource.open(cut, follow=True)
    assert src.first is not None
    model = TraceModel.of_source(src)
    last_event = model.tasks.last_t
    assert last_event is not None and model.timeline.n > 0
    # samples reach the time of the events read: the dashboard shows the run up to the cut
    assert model.timeline.times[-1] >= last_event - 2 * float(src.header["sample_interval_s"])
    queue = model.snapshot(last_event).overview
    assert queue is not None

