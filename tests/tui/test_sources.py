"""Opening, truncation, corruption, following and stalling of trace sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfuse.trace import TraceError, TraceWriter
from tests.tui.tracegen import Incident
from tui.app import run_watch
from tui.sources import STALL_AFTER_S, TraceSource


def test_open_reads_the_timeline_and_defers_events(incident: Incident) -> None:
    src = TraceSource.open(incident.path)
    assert src.first is not None and src.first.complete
    assert len(src.first.times) > 50
    assert src.pending_frames == -(-incident.n_events // 400)  # ceil: frames of 400 events
    total = 0
    while (chunk := src.decode_next()) is not None:
        total += len(chunk)
    assert total == incident.n_events


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such trace file"), (b"hello world\n", "not a taskfuse trace"),
     (b"TFTRACE1\n\x00\x00", "truncated before its header")],
)
def test_unusable_files_raise_one_clear_error(tmp_path: Path, content: bytes | None,
                                             message: str) -> None:
    path = tmp_path / "bad.trace"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        TraceSource.open(path)


def test_a_truncated_trace_is_refused_for_replay_but_followed(trace_copy: Path) -> None:
    data = trace_copy.read_bytes()
    trace_copy.write_bytes(data[: len(data) - 7])  # cut inside the footer frame
    with pytest.raises(TraceError, match="truncated"):
        TraceSource.open(trace_copy)
    src = TraceSource.open(trace_copy, follow=True)
    assert src.first is not None and not src.first.complete and src.first.partial


def test_a_corrupt_event_frame_fails_when_decoded(trace_copy: Path) -> None:
    data = bytearray(trace_copy.read_bytes())
    src = TraceSource.open(trace_copy)
    at, _ = src._pending[1]
    data[at + 10 : at + 20] = b"\x00" * 10
    trace_copy.write_bytes(bytes(data))
    src = TraceSource.open(trace_copy)
    src.decode_next()
    with pytest.raises(TraceError, match="corrupt frame"):
        src.decode_next()


def test_run_watch_prints_one_line_and_returns_2(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run_watch(str(tmp_path / "missing.trace")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such trace file" in err
    assert "Traceback" not in err


def test_run_watch_rejects_an_unknown_theme(incident: Incident,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert run_watch(str(incident.path), theme="no-such-theme") == 2
    assert "unknown theme" in capsys.readouterr().err


def _header() -> dict[str, object]:
    return {"source": "runtime", "scenario": "live", "seed": 1, "sample_interval_s": 1.0,
            "series": ["queue_depth", "running"], "meta": {}}


def test_follow_sees_appended_frames_and_reports_a_stall(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "live.trace"
    writer = TraceWriter(path, _header(), flush_every=10)
    src = TraceSource.open(path, follow=True, clock=lambda: now[0])
    assert src.first is not None and src.first.empty
    writer.sample(1.0, [5, 1])
    writer.event((1.0, "submit", "t1", None, None, None, "PENDING", None, 1, None, None, None))
    writer.flush()
    delta = src.poll()
    assert delta.grew and list(delta.times) == [1.0] and delta.new_event_frames == 1
    now[0] = STALL_AFTER_S - 1
    assert src.poll().stalled_for is None
    now[0] = STALL_AFTER_S + 1
    assert src.poll().stalled_for == pytest.approx(STALL_AFTER_S + 1)
    writer.close({"ok": True})
    end = src.poll()
    assert end.complete and end.report == {"ok": True} and end.stalled_for is None
    now[0] += 100
    assert src.poll().stalled_for is None  # a finished run is not stalled
