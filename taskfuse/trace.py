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
  series of the header (nulls allowed). Appended as the run goes.
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


def _pack(kind: int, obj: Any) -> bytes:
    body = zlib.compress(json.dumps(obj, separators=(",", ":")).encode(), 6)
    return _LEN.pack(len(body), kind) + body


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
        if self._events:
            cols = [list(c) for c in zip(*self._events, strict=True)]
            self._fh.write(_pack(EVENTS, {"c": cols}))
            self._events = []

    def _flush_samples(self) -> None:
        if self._t:
            self._fh.write(_pack(SAMPLES, {"t": self._t, "v": self._rows}))
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


def _frames(fh: IO[bytes], path: Path) -> Iterator[tuple[int, Any, int]]:
    """Yield (type, decoded object, end offset) for each complete frame from fh's position."""
    while True:
        head = fh.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        length, kind = _LEN.unpack(head)
        body = fh.read(length)
        if len(body) < length:
            return
        try:
            obj = json.loads(zlib.decompress(body))
        except (zlib.error, ValueError) as exc:
            raise TraceError(f"{path}: corrupt frame at byte {fh.tell() - length}: {exc}") from None
        yield kind, obj, fh.tell()


def _open(path: str | os.PathLike[str]) -> tuple[IO[bytes], Path]:
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - returned to the caller
    except FileNotFoundError:
        raise TraceError(f"{p}: no such trace file") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot open trace: {exc.strerror}") from None
    if fh.read(len(MAGIC)) != MAGIC:
        fh.close()
        raise TraceError(f"{p}: not a taskfuse trace (expected it to start with {MAGIC!r})")
    return fh, p


def _check_header(kind: int, obj: Any, path: Path) -> dict[str, Any]:
    if kind != HEADER or not isinstance(obj, dict):
        raise TraceError(f"{path}: the first frame is not a header")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"{path}: schema_version {version!r} is not supported (this reader reads "
            f"{SCHEMA_VERSION})"
        )
    return obj


class TraceReader:
    """Reads a trace incrementally: `poll()` takes in whatever complete frames were appended.

    `read_trace` is this with one poll; a follower (the monitor's --follow) polls on a timer.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fh, self.path = _open(path)
        first = next(_frames(self._fh, self.path), None)
        if first is None:
            self._fh.close()
            raise TraceError(f"{self.path}: truncated before its header")
        self.header = _check_header(first[0], first[1], self.path)
        self._offset = first[2]
        self._t: list[float] = []
        self._rows: list[list[Any]] = []
        self._cols: list[list[Any]] = [[] for _ in EVENT_FIELDS]
        self.report: dict[str, Any] | None = None
        self.complete = False

    def poll(self) -> int:
        """Read newly completed frames; returns how many were read."""
        self._fh.seek(self._offset)
        n = 0
        for kind, obj, end in _frames(self._fh, self.path):
            self._offset = end
            n += 1
            if kind == SAMPLES:
                self._t.extend(obj["t"])
                self._rows.extend(obj["v"])
            elif kind == EVENTS:
                for mine, theirs in zip(self._cols, obj["c"], strict=True):
                    mine.extend(theirs)
            elif kind == FOOTER:
                self.report = obj.get("report")
                self.complete = True
            else:
                raise TraceError(f"{self.path}: unknown frame type {kind!r}")
        return n

    @property
    def size(self) -> int:
        return os.fstat(self._fh.fileno()).st_size

    def snapshot(self) -> Trace:
        """The trace as read so far, with the timeline as numpy columns."""
        names = self.header["series"]
        times = np.asarray(self._t, dtype=float)
        if self._rows:
            matrix = np.array(self._rows, dtype=float)  # None -> nan
        else:
            matrix = np.zeros((0, len(names)))
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
