"""The recorded-run format: written by the lab and the runtime, read by the monitor and scripts.

Layout
------
A trace is a file of frames, so it can be appended to while a run goes on and read while it
is being written (`follow`)::

    b"TFTRACE1\\n"                       magic, 9 bytes
    frame*                              each: 4-byte big-endian length N, 1-byte type, then
                                        N bytes of zlib-compressed UTF-8 JSON

Frame types:

* ``H`` header (first frame): ``{"schema_version": 1, "source": "lab"|"runtime",
  "scenario": ..., "seed": ..., "series": [names...], "sample_interval_s": ...,
  "meta": {...}}``. `series` lists the timeline's series in column order.
* ``S`` samples: ``{"t": [...], "v": [[...], ...]}`` — one row per sample time, one column per
  series of the header (nulls allowed). Appended as the run goes: before every event frame,
  the samples taken so far.
* ``E`` events: ``{"c": [[...] * 12]}`` — columns in `Event` field order (t, kind, task_id,
  batch_id, trace_id, src, dst, reason, attempt, worker, subject, value).
* ``F`` footer (last frame, once the run ended): ``{"report": {...}}``, the run's report.

Standard series (a writer includes those that apply; readers must tolerate missing ones):

* ``queue_depth``, ``running``, ``running_limit`` (workers able to take a task: live and not
  stuck), ``stuck`` (workers still busy with an attempt that was timed out or canceled:
  threads that cannot be killed), ``submitted``,
  ``done.SUCCESS`` / ``done.FAILED`` / ``done.TIMEOUT`` / ``done.CANCELED`` (cumulative),
  ``throughput`` (tasks ended per second over the last interval), ``success_rate``,
  ``alerts.firing`` (how many alert rules fire);
* per downstream NAME: ``ds.NAME.in_flight``, ``ds.NAME.limit`` (bulkhead size, NaN if none),
  ``ds.NAME.rps`` (requests sent per second over the last interval), ``ds.NAME.r429`` and
  ``ds.NAME.errors`` (cumulative), ``ds.NAME.breaker`` (a `BREAKER_CODES` value, NaN if no
  breaker), ``ds.NAME.reopen_in`` (seconds until half-open while open), ``ds.NAME.tokens``;
* per DB pool NAME: ``pool.NAME.in_use``, ``pool.NAME.waiting``, ``pool.NAME.size``;
* business traffic: ``biz.p50``, ``biz.p99`` (over the last interval), ``biz.slo_p99``,
  ``biz.timeouts`` (cumulative), ``biz.breaker`` (the gateway's breaker, a code);
* per batch ID: ``batch.ID.PENDING`` ... ``batch.ID.CANCELED`` (counts), ``batch.ID.p99``.

The header's ``meta`` names them: ``{"downstreams": [...], "pools": [...], "batches": [...],
"workers": N, "slo": {...}}``.

Columnar JSON compressed per frame keeps a 1,000,000-task run well under 100 MB, and a reader
that meets a half-written last frame simply stops there (or waits, when following).

What a reader promises about a hostile or damaged file: a `TraceError` of one line, never
another exception, and bounded memory. Every frame inflates to at most `MAX_FRAME_BYTES`
(zlib's checksum is verified, so a flipped bit anywhere is noticed) and holds at most
`MAX_FRAME_CONTAINERS` JSON arrays and objects (writers split frames to stay below both);
the header, samples, events and footer must have the shapes above, and the footer's report
the types its readers use (`makespan_s`, `business`, `downstreams`, `slo`).
`check_trace` checks a whole file frame by frame without keeping it (the monitor's
`lab watch` runs it before it opens a trace, so a bad file is one line and exit 2; in a
file over `FULL_CHECK_BYTES` the shape of event frames is left to the monitor, which
decodes them in the background and shows a bad one as one line).

Reading in a script or notebook::

    from taskfuse.trace import read_trace
    tr = read_trace("incident.trace")
    t, depth = tr.series("queue_depth")          # two numpy arrays
    for ev in tr.events(kind="breaker"): ...     # taskfuse.core.events.Event values
    tr.report                                    # the footer's report (None while running)
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from taskfuse.core.events import Event

MAGIC = b"TFTRACE1\n"
SCHEMA_VERSION = 1
_LEN = struct.Struct(">IB")
#: The JSON of one frame inflates to at most this; a writer splits a larger one. (A legit
#: frame is a few MB; a 300 KB zlib bomb would inflate to 300 MB.)
MAX_FRAME_BYTES = 16 * 1024 * 1024
#: ... and holds at most this many JSON arrays and objects (``[[],[],...]`` is small text
#: but 64 bytes of memory per three characters).
MAX_FRAME_CONTAINERS = 1_000_000
#: A compressed frame is never longer than its JSON plus zlib's few bytes of framing.
_MAX_BODY = MAX_FRAME_BYTES + 64 * 1024
HEADER, SAMPLES, EVENTS, FOOTER = b"H"[0], b"S"[0], b"E"[0], b"F"[0]
EVENT_FIELDS = Event._fields
#: How breaker states are coded in the timeline.
BREAKER_CODES = {"closed": 0, "half_open": 1, "open": 2}


class TraceError(Exception):
    """A trace that cannot be read: missing, not a trace, corrupt, or of a newer schema."""


def compact(event: Event) -> tuple[Any, ...]:
    """The form every writer stores an event in: time to the microsecond, and the trace id
    only on submit events (a task's trace id never changes; readers join on task_id), which
    keeps a million-task trace small. One rule for the lab's, the runtime's and the load
    test's traces."""
    trace_id = event.trace_id if event.kind == "submit" else None
    return (round(event.t, 6), event.kind, event.task_id, event.batch_id, trace_id, *event[5:])


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _fits(raw: bytes) -> bool:
    return len(raw) <= MAX_FRAME_BYTES and _containers(raw) <= MAX_FRAME_CONTAINERS


def _containers(raw: bytes) -> int:
    """JSON arrays and objects in a text (an upper bound: brackets in strings count too)."""
    return raw.count(b"[") + raw.count(b"{")


def _frame(kind: int, raw: bytes) -> bytes:
    body = zlib.compress(raw, 6)
    return _LEN.pack(len(body), kind) + body


def _pack(kind: int, obj: Any) -> bytes:
    return _frame(kind, _encode(obj))


def _pack_rows(kind: int, rows: Sequence[Any], to_obj: Any) -> list[bytes]:
    """Frames of `to_obj(rows)`, halving the rows until every frame fits the readers' bounds."""
    raw = _encode(to_obj(rows))
    if len(rows) > 1 and not _fits(raw):
        mid = len(rows) // 2
        return _pack_rows(kind, rows[:mid], to_obj) + _pack_rows(kind, rows[mid:], to_obj)
    return [_frame(kind, raw)]


def _event_frame(events: Sequence[Sequence[Any]]) -> dict[str, Any]:
    return {"c": [list(c) for c in zip(*events, strict=True)]}


class TraceWriter:
    """Appends frames; buffers events and samples and flushes them in chunks.

    `flush_every` events (or samples) make a frame; `flush()` forces one, so a follower sees a
    live run promptly. Writes go to `path` directly, each frame in one write call.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: dict[str, Any],
        flush_every: int = 20_000,
    ) -> None:
        self.path = Path(path)
        self.series: list[str] = list(header["series"])
        self._fh: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._fh.write(MAGIC)
        self._fh.write(_pack(HEADER, {"schema_version": SCHEMA_VERSION, **header}))
        self._fh.flush()
        self._events: list[Sequence[Any]] = []
        self._t: list[float] = []
        self._rows: list[list[Any]] = []
        self._flush_every = flush_every
        self.closed = False

    def event(self, event: Sequence[Any]) -> None:
        """Add one event (an `Event` or a tuple in its field order)."""
        self._events.append(event)
        if len(self._events) >= self._flush_every:
            self._flush_events()

    def sample(self, t: float, values: list[Any]) -> None:
        """Add one timeline row: values in the header's series order."""
        self._t.append(t)
        self._rows.append(values)
        if len(self._t) >= self._flush_every // 10:
            self._flush_samples()

    def _flush_events(self) -> None:
        """Write the buffered events, after the samples taken so far: the timeline keeps in
        step with the events, so a trace cut anywhere (a run still going, or killed) replays
        with a dashboard. Samples used to wait for their own, rarer frame: a simulation
        wrote them all near its end."""
        self._flush_samples()
        if self._events:
            for frame in _pack_rows(EVENTS, self._events, _event_frame):
                self._fh.write(frame)
            self._events = []

    def _flush_samples(self) -> None:
        if self._t:
            rows = list(zip(self._t, self._rows, strict=True))
            for frame in _pack_rows(SAMPLES, rows, lambda r: {"t": [t for t, _ in r],
                                                              "v": [v for _, v in r]}):
                self._fh.write(frame)
            self._t, self._rows = [], []

    def flush(self) -> None:
        self._flush_samples()
        self._flush_events()
        self._fh.flush()

    def close(self, report: dict[str, Any] | None = None) -> None:
        """Flush, write the footer with the run's report, and close."""
        if self.closed:
            return
        self.flush()
        self._fh.write(_pack(FOOTER, {"report": report}))
        self._fh.close()
        self.closed = True

    def abort(self) -> None:
        """Close without a footer (the run did not finish); readers see it as incomplete."""
        if not self.closed:
            self.flush()
            self._fh.close()
            self.closed = True


@dataclass
class Trace:
    """A trace read into memory: header, timeline columns, events, report."""

    path: Path
    header: dict[str, Any]
    times: np.ndarray
    columns: dict[str, np.ndarray]
    event_columns: list[list[Any]]
    report: dict[str, Any] | None
    complete: bool
    truncated: bool = False
    offset: int = 0

    @property
    def series_names(self) -> list[str]:
        return list(self.header["series"])

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one timeline series; values are float (NaN where null)."""
        if name not in self.columns:
            raise KeyError(f"no series {name!r} in {self.path} (has {len(self.columns)} series)")
        return self.times, self.columns[name]

    @property
    def n_events(self) -> int:
        return len(self.event_columns[0]) if self.event_columns else 0

    def events(self, kind: str | None = None, task_id: str | None = None) -> Iterator[Event]:
        """Iterate events in order, optionally of one kind or one task (or trace_id)."""
        cols = self.event_columns
        if not cols:
            return
        kinds, tasks, traces = cols[1], cols[2], cols[4]
        for i in range(len(cols[0])):
            if kind is not None and kinds[i] != kind:
                continue
            if task_id is not None and tasks[i] != task_id and traces[i] != task_id:
                continue
            yield Event(*(c[i] for c in cols))

    def event_array(self, name: str) -> np.ndarray:
        """One event column as a numpy array (t as float, the rest as object)."""
        idx = EVENT_FIELDS.index(name)
        col = self.event_columns[idx] if self.event_columns else []
        return np.asarray(col, dtype=float if name in ("t", "value") else object)


def _frames(fh: IO[bytes], path: Path) -> Iterator[tuple[int, Any, int, int]]:
    """Yield (type, decoded object, JSON containers in it, end offset) for each complete
    frame from fh's position."""
    for kind, at, body in _raw_frames(fh, path):
        raw, containers = _inflate(body, at, path)
        yield kind, _json(raw, at, path), containers, fh.tell()


def _raw_frames(fh: IO[bytes], path: Path) -> Iterator[tuple[int, int, bytes]]:
    """Yield (type, offset, compressed body) of each complete frame from fh's position."""
    while True:
        at = fh.tell()
        head = fh.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        length, kind = _LEN.unpack(head)
        if length > _MAX_BODY:
            raise TraceError(f"{path}: corrupt frame at byte {at}: a length of {length:,} "
                             f"bytes (no writer makes frames over {_MAX_BODY:,})")
        body = fh.read(length)
        if len(body) < length:
            fh.seek(at)
            return
        yield kind, at, body


def inflate_frame(body: bytes, at: int, path: str | os.PathLike[str]) -> bytes:
    """A frame's JSON text, inflated within MAX_FRAME_BYTES and checked by zlib's checksum
    (its JSON arrays and objects are not counted: that bounds decoding, done elsewhere)."""
    return _inflate(body, at, path, count=False)[0]


def _inflate(body: bytes, at: int, path: str | os.PathLike[str], count: bool = True
             ) -> tuple[bytes, int]:
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, MAX_FRAME_BYTES + 1)
    except zlib.error as exc:
        raise TraceError(f"{path}: corrupt frame at byte {at}: {exc}") from None
    if len(raw) > MAX_FRAME_BYTES:
        raise TraceError(f"{path}: corrupt frame at byte {at}: it inflates to more than "
                         f"{MAX_FRAME_BYTES >> 20} MiB (no writer makes such frames)")
    if not inflater.eof or inflater.unused_data:
        what = "cut short" if not inflater.eof else "followed by stray bytes"
        raise TraceError(f"{path}: corrupt frame at byte {at}: its compressed data is {what}")
    containers = _containers(raw) if count else 0
    if containers > MAX_FRAME_CONTAINERS:
        raise TraceError(f"{path}: corrupt frame at byte {at}: more than "
                         f"{MAX_FRAME_CONTAINERS:,} JSON arrays and objects")
    return raw, containers


def decode_frame(body: bytes, at: int, path: str | os.PathLike[str]) -> Any:
    """A frame's JSON value (bounded as `inflate_frame`); TraceError if it is not JSON."""
    return _json(inflate_frame(body, at, path), at, path)


def _json(raw: bytes, at: int, path: str | os.PathLike[str]) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise TraceError(f"{path}: corrupt frame at byte {at}: not JSON ({exc})") from None


# -- shapes: what each frame must hold (one line naming the frame when it does not) --------


def _bad(path: Any, what: str, at: int, expected: str) -> TraceError:
    return TraceError(f"{path}: {what} frame at byte {at}: expected {expected}")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _str_list(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def check_header(obj: Any, path: str | os.PathLike[str], at: int = len(MAGIC)) -> dict[str, Any]:
    """The header's shape (see the module doc); `meta` and its name lists get defaults."""
    if not isinstance(obj, dict):
        raise TraceError(f"{path}: the first frame is not a header")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"{path}: schema_version {version!r} is not supported (this reader reads "
            f"{SCHEMA_VERSION})"
        )
    if not _str_list(obj.get("series")):
        raise _bad(path, "header", at, "series: a list of names")
    interval = obj.get("sample_interval_s")
    if interval is not None and not (_is_number(interval) and 0 < interval < float("inf")):
        raise _bad(path, "header", at, "sample_interval_s: a number of seconds > 0")
    for key in ("source", "scenario"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise _bad(path, "header", at, f"{key}: a string")
    meta = obj.setdefault("meta", {})
    if not isinstance(meta, dict):
        raise _bad(path, "header", at, "meta: a mapping")
    for key in ("downstreams", "pools", "batches"):
        if not _str_list(meta.setdefault(key, [])):
            raise _bad(path, "header", at, f"meta.{key}: a list of names")
    for key in ("slo",):
        if not isinstance(meta.setdefault(key, {}), dict):
            raise _bad(path, "header", at, f"meta.{key}: a mapping")
    if meta.get("t0_epoch") is not None and not _is_number(meta["t0_epoch"]):
        raise _bad(path, "header", at, "meta.t0_epoch: a number")
    return obj


def samples_of(obj: Any, n_series: int, at: int, path: str | os.PathLike[str]
               ) -> tuple[np.ndarray, np.ndarray]:
    """A samples frame as (times, rows x series) float arrays; null reads as NaN."""
    expected = f'{{"t": [n times], "v": [n rows of {n_series} numbers or nulls]}}'
    if not (isinstance(obj, dict) and isinstance(obj.get("t"), list)
            and isinstance(obj.get("v"), list) and len(obj["t"]) == len(obj["v"])):
        raise _bad(path, "samples", at, expected)
    try:
        times = np.asarray(obj["t"], dtype=float)
        rows = np.asarray(obj["v"], dtype=float)
    except (TypeError, ValueError):
        raise _bad(path, "samples", at, expected) from None
    if not len(times):
        rows = rows.reshape(0, n_series)
    if times.ndim != 1 or rows.shape != (len(times), n_series):
        raise _bad(path, "samples", at, expected)
    return times, rows


_NUMERIC_EVENT_FIELDS = tuple(EVENT_FIELDS.index(f) for f in ("t", "attempt", "value"))


def event_columns_of(obj: Any, at: int, path: str | os.PathLike[str],
                     containers: int | None = None) -> list[list[Any]]:
    """An events frame's 12 columns, of equal length; t, attempt and value numeric (or null),
    the others scalars (a nested list or mapping is refused).

    `containers`, the count of ``[`` and ``{`` in the frame's text, spares the scan for
    nested values when there can be none (the frame's own 14 brackets and no more)."""
    expected = (f'{{"c": [{len(EVENT_FIELDS)} columns of equal length]}} '
                f"(columns {', '.join(EVENT_FIELDS)})")
    cols = obj.get("c") if isinstance(obj, dict) else None
    if not (isinstance(cols, list) and len(cols) == len(EVENT_FIELDS)
            and all(isinstance(c, list) and len(c) == len(cols[0]) for c in cols)):
        raise _bad(path, "events", at, expected)
    for i, col in enumerate(cols):
        name = EVENT_FIELDS[i]
        if i in _NUMERIC_EVENT_FIELDS:
            try:
                values = np.asarray(col, dtype=float)
            except (TypeError, ValueError):
                raise _bad(path, "events", at, f"column {name}: numbers or nulls") from None
            if values.ndim != 1 or (i == 0 and np.isnan(values).any()):
                raise _bad(path, "events", at, f"column {name}: numbers"
                           + (" or nulls" if i else ""))
        elif (containers is None or containers > _EVENT_FRAME_CONTAINERS) and (
                _NESTED & set(map(type, col))):
            raise _bad(path, "events", at, f"column {name}: strings, numbers or nulls")
    return cols


_NESTED = frozenset({list, dict})
_EVENT_FRAME_CONTAINERS = 2 + len(EVENT_FIELDS)  # {"c": [ and a [ per column


def report_of(obj: Any, at: int, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The footer's report (None for a run that ended without one), with the types its
    readers rely on."""
    report = obj.get("report") if isinstance(obj, dict) else ()
    if report is None:
        return None
    expected = ('{"report": null or a mapping whose makespan_s is a number, business and '
                "slo are mappings, downstreams maps names to mappings}")
    if not isinstance(report, dict):
        raise _bad(path, "footer", at, expected)
    business, slo = report.get("business") or {}, report.get("slo") or {}
    downstreams = report.get("downstreams") or {}
    ok = (
        (report.get("makespan_s") is None or _is_number(report["makespan_s"]))
        and isinstance(business, dict) and isinstance(slo, dict)
        and all(business.get(k) is None or _is_number(business[k]) for k in ("p99_s", "timeouts"))
        and isinstance(downstreams, dict)
        and all(isinstance(d, dict) and _is_number(d.get("rejected_429", 0))
                for d in downstreams.values())
    )
    if not ok:
        raise _bad(path, "footer", at, expected)
    return report


def _open(path: str | os.PathLike[str]) -> tuple[IO[bytes], Path]:
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - returned to the caller
    except FileNotFoundError:
        raise TraceError(f"{p}: no such trace file") from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot open trace: {exc.strerror}") from None
    try:
        magic = fh.read(len(MAGIC))
    except OSError as exc:
        fh.close()
        raise TraceError(f"{p}: cannot read trace: {exc.strerror}") from None
    if magic != MAGIC:
        fh.close()
        what = "an empty file" if not magic else "not a taskfuse trace"
        raise TraceError(f"{p}: {what} (a trace starts with the line "
                         f"{MAGIC.decode().strip()!r})")
    return fh, p


#: `check_trace` decodes event frames for their shape only in files up to this size; in a
#: larger one it checks them for damage (zlib's checksum) and leaves the shape to whoever
#: decodes them: a 1,000,000-task trace (30 MB) is checked in about 1 s instead of 4.5 s.
FULL_CHECK_BYTES = 8 * 1024 * 1024


def check_trace(path: str | os.PathLike[str], follow: bool = False,
                full_check_bytes: int = FULL_CHECK_BYTES) -> dict[str, Any]:
    """Check a whole trace frame by frame without keeping it; returns its header.

    Every frame is inflated within bounds (so damage anywhere is found by zlib's checksum)
    and the header, samples, footer, and the events of a file up to `full_check_bytes`, are
    checked for shape. A file that ends inside a frame is an error unless `follow` (a run
    still being written). Memory: one frame at a time.
    """
    fh, p = _open(path)
    with fh:
        events_too = os.fstat(fh.fileno()).st_size <= full_check_bytes
        frames = _raw_frames(fh, p)
        first = next(frames, None)
        if first is None:
            raise TraceError(f"{p}: truncated before its header")
        if first[0] != HEADER:
            raise TraceError(f"{p}: the first frame is not a header")
        header = check_header(decode_frame(first[2], first[1], p), p, first[1])
        n_series = len(header["series"])
        for kind, at, body in frames:
            if kind == EVENTS and not events_too:
                inflate_frame(body, at, p)
            else:
                raw, containers = _inflate(body, at, p)
                _check_frame(kind, _json(raw, at, p), n_series, at, p, containers)
        size, end = os.fstat(fh.fileno()).st_size, fh.tell()
    if end < size and not follow:
        raise TraceError(f"{p}: truncated: the last frame is cut off at byte {end} "
                         "(if the run is still being written, follow it instead)")
    return header


def _check_frame(kind: int, obj: Any, n_series: int, at: int, path: Path,
                 containers: int) -> None:
    if kind == SAMPLES:
        samples_of(obj, n_series, at, path)
    elif kind == FOOTER:
        report_of(obj, at, path)
    elif kind == EVENTS:
        event_columns_of(obj, at, path, containers)
    else:
        raise _unknown_frame(kind, at, path)


def _unknown_frame(kind: int, at: int, path: Path) -> TraceError:
    if kind == HEADER:
        return TraceError(f"{path}: corrupt frame at byte {at}: a second header")
    return TraceError(f"{path}: corrupt frame at byte {at}: unknown frame type {kind!r}")


class TraceReader:
    """Reads a trace incrementally: `poll()` takes in whatever complete frames were appended.

    `read_trace` is this with one poll; a follower (the monitor's --follow) polls on a timer.
    Every frame is checked for shape as it is read (module doc): a bad one is a TraceError.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fh, self.path = _open(path)
        try:
            first = next(_raw_frames(self._fh, self.path), None)
            if first is None:
                raise TraceError(f"{self.path}: truncated before its header")
            kind, at, body = first
            if kind != HEADER:
                raise TraceError(f"{self.path}: the first frame is not a header")
            self.header = check_header(decode_frame(body, at, self.path), self.path, at)
        except BaseException:
            self._fh.close()
            raise
        self._offset = self._fh.tell()
        self._t: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._cols: list[list[Any]] = [[] for _ in EVENT_FIELDS]
        self.report: dict[str, Any] | None = None
        self.complete = False

    def poll(self) -> int:
        """Read newly completed frames; returns how many were read."""
        self._fh.seek(self._offset)
        n = 0
        n_series = len(self.header["series"])
        for kind, obj, containers, end in _frames(self._fh, self.path):
            at = self._offset
            if kind == SAMPLES:
                times, rows = samples_of(obj, n_series, at, self.path)
                self._t.append(times)
                self._rows.append(rows)
            elif kind == EVENTS:
                cols = event_columns_of(obj, at, self.path, containers)
                for mine, theirs in zip(self._cols, cols, strict=True):
                    mine.extend(theirs)
            elif kind == FOOTER:
                self.report = report_of(obj, at, self.path)
                self.complete = True
            else:
                raise _unknown_frame(kind, at, self.path)
            self._offset = end
            n += 1
        return n

    @property
    def size(self) -> int:
        return os.fstat(self._fh.fileno()).st_size

    def snapshot(self) -> Trace:
        """The trace as read so far, with the timeline as numpy columns."""
        names = self.header["series"]
        times = np.concatenate(self._t) if self._t else np.zeros(0)
        matrix = np.concatenate(self._rows) if self._rows else np.zeros((0, len(names)))
        columns = {name: matrix[:, i] for i, name in enumerate(names)}
        return Trace(
            self.path, self.header, times, columns, self._cols, self.report, self.complete,
            truncated=not self.complete and self.size > self._offset, offset=self._offset,
        )

    def close(self) -> None:
        self._fh.close()


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace (complete or still being written) into memory."""
    reader = TraceReader(path)
    try:
        reader.poll()
        return reader.snapshot()
    finally:
        reader.close()
