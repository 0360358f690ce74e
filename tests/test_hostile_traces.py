"""Hostile traces: every reader answers a damaged or forged trace with one line and exit 2.

Starting from a real trace (a simulation of the shipped seed demo), frames are replaced by
valid zlib frames of JSON of any shape, the file is truncated, bits are flipped, frame
types and lengths are forged, and a decompression bomb is planted. `read_trace` raises only
TraceError; `lab watch` (up to the point where the monitor would start), `lab plot` and the
alerts command answer with one line and exit 2; all within 5 s and 500 MB.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.cli import main as lab_main
from lab.scenario import load_scenario
from lab.simulate.run import run_scenario
from taskfuse.observe.alerts import main as alerts_main
from taskfuse.trace import MAGIC, MAX_FRAME_BYTES, TraceError, check_trace, read_trace
from tests.hostile import Answer, WouldGoOn, answer_of, run_measured
from tests.scale import examples

ROOT = Path(__file__).resolve().parents[1]
FRAME = struct.Struct(">IB")
KEYS = ["t", "v", "c", "report", "series", "schema_version", "meta", "makespan_s",
        "business", "downstreams", "slo", "p99_s", "rejected_429", "ok", "downstreams",
        "pools", "batches", "sample_interval_s", "source", "t0_epoch"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
    | st.text(max_size=4),
    lambda inner: (st.lists(inner, max_size=5)
                   | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), inner,
                                     max_size=5)),
    max_leaves=25,
)


@pytest.fixture(scope="module")
def trace_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("trace") / "demo.trace"
    run_scenario(load_scenario(ROOT / "scenarios" / "seed-demo.yaml"), None, path)
    return path.read_bytes()


def frames(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], len(MAGIC)
    while at < len(data):
        length, kind = FRAME.unpack_from(data, at)
        out.append((kind, data[at + FRAME.size: at + FRAME.size + length]))
        at += FRAME.size + length
    return out


def pack(parts: list[tuple[int, bytes]]) -> bytes:
    return MAGIC + b"".join(FRAME.pack(len(body), kind) + body for kind, body in parts)


def _bomb_body() -> bytes:
    """JSON `[ ... ]` padded with 300 MB of spaces: 300 KB compressed (built in chunks)."""
    z = zlib.compressobj(9)
    chunks = [z.compress(b"[")]
    spaces = b" " * (1 << 20)
    chunks += [z.compress(spaces) for _ in range(300)]
    chunks += [z.compress(b"]"), z.flush()]
    return b"".join(chunks)


BOMB = _bomb_body()


@st.composite
def hostile(draw, data: bytes) -> bytes:
    parts = frames(data)
    how = draw(st.sampled_from(["shape", "near-shape", "truncate", "flip", "type", "length",
                                "bomb"]))
    i = draw(st.integers(0, len(parts) - 1))
    kind, body = parts[i]
    if how == "shape":
        parts[i] = (kind, zlib.compress(json.dumps(draw(JSON)).encode()))
    elif how == "near-shape":  # the real frame with one entry replaced
        obj = json.loads(zlib.decompress(body))
        key = draw(st.sampled_from(sorted(obj))) if obj else "x"
        obj[key] = draw(JSON)
        parts[i] = (kind, zlib.compress(json.dumps(obj).encode()))
    elif how == "type":
        parts[i] = (draw(st.integers(0, 255)), body)
    elif how == "bomb":
        parts[i] = (kind, BOMB)
    packed = pack(parts)
    if how == "truncate":
        return packed[: draw(st.integers(0, len(packed) - 1))]
    if how == "flip":
        flipped = bytearray(packed)
        for _ in range(draw(st.integers(1, 8))):
            at = draw(st.integers(len(MAGIC), len(packed) - 1))
            flipped[at] ^= 1 << draw(st.integers(0, 7))
        return bytes(flipped)
    if how == "length":
        at = len(MAGIC) + sum(FRAME.size + len(b) for _, b in parts[:i])
        forged = bytearray(packed)
        forged[at: at + 4] = struct.pack(">I", draw(st.integers(0, 2**32 - 1)))
        return bytes(forged)
    return packed


def _stand_in_monitor(path: str, follow: bool = False, speed: float = 1.0) -> int:
    """What `lab watch` would open, without a terminal: build the app, decode every event
    frame as its background loader would. A failure here would be an in-app error."""
    from tui.app import create_app

    try:
        app = create_app(path, follow=follow, speed=speed)
    except TraceError as exc:
        print(f"watch: {exc}", file=sys.stderr)
        return 2
    while app.source.decode_next() is not None:
        pass
    raise WouldGoOn


def read_answer(path: Path) -> Answer:
    def read(argv: list[str]) -> int:
        try:
            read_trace(argv[0])
        except TraceError as exc:
            print(exc, file=sys.stderr)
            return 2
        raise WouldGoOn

    return answer_of(read, [str(path)])


def readers(path: Path) -> Iterator[tuple[str, Answer]]:
    yield "read_trace", read_answer(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tui.app.run_watch", _stand_in_monitor)
        yield "lab watch", answer_of(lab_main, ["watch", str(path)])
    yield "alerts", answer_of(alerts_main, [str(path)])


@settings(max_examples=examples(250), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_reader_answers_a_hostile_trace_with_one_line(trace_bytes: bytes,
                                                            data: st.DataObject) -> None:
    forged = data.draw(hostile(trace_bytes))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.trace"
        path.write_bytes(forged)
        answers = dict(readers(path))
    for name, answer in answers.items():
        if name == "alerts" and answer.code in (0, 1):
            continue  # a trace it could read: alerts answered
        answer.hold_to_promises()
    # what read_trace refuses, the monitor refuses too, before it starts (the monitor also
    # refuses a cut-off last frame, which read_trace reads as a run still being written)
    if answers["read_trace"].code == 2:
        assert answers["lab watch"].code == 2, answers


@settings(max_examples=examples(20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_lab_plot_draws_or_answers_one_line(trace_bytes: bytes, data: st.DataObject) -> None:
    pytest.importorskip("matplotlib")
    forged = data.draw(hostile(trace_bytes))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.trace"
        path.write_bytes(forged)
        answer = answer_of(lab_main, ["plot", str(path), "-o", str(Path(tmp) / "p.png")])
    if answer.code != 0:
        answer.hold_to_promises()


def test_a_decompression_bomb_is_refused_unread(trace_bytes: bytes, tmp_path: Path) -> None:
    parts = frames(trace_bytes)
    parts[1] = (parts[1][0], BOMB)
    path = tmp_path / "bomb.trace"
    path.write_bytes(pack(parts))
    assert len(BOMB) < 400_000
    with pytest.raises(TraceError, match=f"inflates to more than {MAX_FRAME_BYTES >> 20} MiB"):
        check_trace(path)
    answer = run_measured("lab.cli", ["watch", str(path)], tmp_path)
    answer.hold_to_promises()
    assert answer.code == 2 and "inflates to more than" in answer.err


def test_a_trace_damaged_mid_file_is_exit_2_before_the_monitor(trace_bytes: bytes,
                                                               tmp_path: Path) -> None:
    """The docs' promise for `lab watch`: one line, exit 2, not an error inside the app."""
    parts = frames(trace_bytes)
    kind, body = parts[len(parts) // 2]
    parts[len(parts) // 2] = (kind, body[:10] + bytes([body[10] ^ 0xFF]) + body[11:])
    path = tmp_path / "damaged.trace"
    path.write_bytes(pack(parts))
    answer = run_measured("lab.cli", ["watch", str(path)], tmp_path)
    answer.hold_to_promises()
    assert answer.code == 2 and "corrupt frame at byte" in answer.err


@pytest.mark.parametrize("obj", [[], {"t": 1}, {"t": [1], "v": [[1, 2, 3, 4]]},
                                 {"c": [[1]] * 11}, {"report": [1]}, {"c": [[1], [[2]]] * 6}])
def test_wrong_shapes_name_the_frame_and_what_was_expected(trace_bytes: bytes, obj: object,
                                                           tmp_path: Path) -> None:
    parts = frames(trace_bytes)
    kinds = {b"S"[0]: {"t", "v"}, b"E"[0]: {"c"}, b"F"[0]: {"report"}}
    wanted = next((k for k, keys in kinds.items()
                   if isinstance(obj, dict) and set(obj) & keys), b"S"[0])
    i = next(j for j, (k, _) in enumerate(parts) if k == wanted)
    parts[i] = (wanted, zlib.compress(json.dumps(obj).encode()))
    path = tmp_path / "shape.trace"
    path.write_bytes(pack(parts))
    with pytest.raises(TraceError, match=r"(samples|events|footer) frame at byte \d+: "
                                         r"expected "):
        read_trace(path)
