"""Where the monitor's data comes from: a recorded trace (replay) or one still being written.

Why not `read_trace`: it decodes every frame before returning, and a 1,000,000-task trace
holds millions of events — seconds of JSON. The monitor opens in two steps instead:

1. `TraceSource.open` validates the file through `taskfuse.trace.TraceReader` (so missing,
   foreign, newer-schema and header-less files fail with its messages), then walks the frames
   by the documented layout, decoding the small ones (header, samples, footer) and only noting
   where the event frames are. The dashboard can draw from that alone.
2. `decode_next` turns one pending event frame into an `EventChunk`; the app calls it from a
   worker thread and posts each chunk to the UI as a message.

Following is the same walk repeated: `poll` picks up frames appended since the last one and
notices when the file stopped growing. A half-written last frame is simply not read yet.
Before a poll the app asks `changed()`: one `os.stat` (size and mtime), so a followed file
that is not growing costs a system call per check and nothing else. Only the loading thread
touches a source's reading state after `open`; the UI sees its output in messages.
"""

from __future__ import annotations

import os
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from taskfuse.trace import (
    EVENTS,
    FOOTER,
    HEADER,
    MAGIC,
    SAMPLES,
    TraceError,
    TraceReader,
    decode_frame,
    event_columns_of,
    report_of,
    samples_of,
)
from tui.taskindex import Decoder, EventChunk

#: Frame prefix per the layout in taskfuse.trace: 4-byte big-endian length, 1-byte type.
_FRAME = struct.Struct(">IB")
#: A followed file that has not grown for this long (wall seconds) is reported as stalled.
STALL_AFTER_S = 5.0


@dataclass(slots=True)
class Delta:
    """What one read of the file added: timeline rows, footer, and growth bookkeeping."""

    times: np.ndarray
    rows: np.ndarray
    new_event_frames: int = 0
    new_event_bytes: int = 0
    report: dict[str, Any] | None = None
    complete: bool = False
    grew: bool = False
    stalled_for: float | None = None  # wall seconds without growth, once past STALL_AFTER_S
    partial: bool = False  # the file ends inside a frame

    @property
    def empty(self) -> bool:
        return not len(self.times) and not self.new_event_frames and not self.complete


@dataclass
class TraceSource:
    """One trace file, read incrementally. Not thread-safe: one reader thread at a time."""

    path: Path
    header: dict[str, Any]
    follow: bool
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    first: Delta | None = None
    _offset: int = 0
    _pending: deque[tuple[int, int]] = field(default_factory=deque)
    _decoder: Decoder = field(default_factory=Decoder)
    _last_growth: float = 0.0
    _events_seen: int = 0
    _pending_bytes: int = 0
    _stat: tuple[int, int] | None = None  # (size, mtime_ns) at the last poll
    complete: bool = False

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], follow: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> TraceSource:
        """Open and scan what is there; raises TraceError (one readable line) if unusable.

        A replayed trace that ends inside a frame is refused as truncated; when following,
        that is just a frame still being written.
        """
        reader = TraceReader(path)
        try:
            header = reader.header
        finally:
            reader.close()
        src = cls(Path(path), header, follow, clock)
        src._offset = len(MAGIC) + _FRAME.size + src._frame_len(len(MAGIC))
        src._last_growth = clock()
        first = src.poll()
        if first.partial and not follow:
            raise TraceError(
                f"{src.path}: truncated: the last frame is cut off at byte {src._offset} "
                "(if the run is still being written, follow it instead)"
            )
        src.first = first
        return src

    def _frame_len(self, at: int) -> int:
        with open(self.path, "rb") as fh:
            fh.seek(at)
            length, _ = _FRAME.unpack(fh.read(_FRAME.size))
        return length

    @property
    def read_upto(self) -> int:
        """The byte offset up to which complete frames have been read."""
        return self._offset

    @property
    def pending_frames(self) -> int:
        return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def changed(self) -> bool:
        """Has the file changed since the last poll? One stat call; True if it vanished
        (the poll then reports why)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_size, st.st_mtime_ns) != self._stat

    def stalled_for(self) -> float | None:
        """Wall seconds without growth of a followed, unfinished file once past
        STALL_AFTER_S (what `poll` would report), else None."""
        if not self.follow or self.complete:
            return None
        idle = self.clock() - self._last_growth
        return idle if idle >= STALL_AFTER_S else None

    def poll(self) -> Delta:
        """Read every complete frame appended since the last poll (events only located)."""
        times: list[float] = []
        rows: list[list[Any]] = []
        delta = Delta(np.empty(0), np.empty((0, len(self.header["series"]))))
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below; reopened per poll
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot read: {exc.strerror}") from None
        with fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            self._stat = (size, st.st_mtime_ns)
            fh.seek(self._offset)
            while self._offset + _FRAME.size <= size:
                length, kind = _FRAME.unpack(fh.read(_FRAME.size))
                end = self._offset + _FRAME.size + length
                if end > size:
                    break
                if kind == EVENTS:
                    self._pending.append((self._offset + _FRAME.size, length))
                    self._pending_bytes += length
                    delta.new_event_frames += 1
                    delta.new_event_bytes += length
                    fh.seek(length, os.SEEK_CUR)
                else:
                    obj = self._decode(fh.read(length), self._offset)
                    if kind == SAMPLES:
                        t, v = samples_of(obj, len(self.header["series"]), self._offset,
                                          self.path)
                        times.extend(t.tolist())
                        rows.extend(v.tolist())
                    elif kind == FOOTER:
                        delta.report = report_of(obj, self._offset, self.path)
                        self.complete = delta.complete = True
                    elif kind != HEADER:
                        raise TraceError(f"{self.path}: unknown frame type {kind!r} at byte "
                                         f"{self._offset}")
                self._offset = end
            delta.partial = size > self._offset
        if rows:
            delta.times = np.asarray(times, dtype=float)
            delta.rows = np.array(rows, dtype=float)  # null -> NaN
        now = self.clock()
        delta.grew = not delta.empty
        if delta.grew:
            self._last_growth = now
        elif self.follow and not self.complete and now - self._last_growth >= STALL_AFTER_S:
            delta.stalled_for = now - self._last_growth
        return delta

    def _decode(self, body: bytes, at: int) -> Any:
        return decode_frame(body, at, self.path)  # bounded: a zlib bomb is a TraceError

    def decode_next(self) -> EventChunk | None:
        """Decode the oldest pending event frame (None when there is none)."""
        if not self._pending:
            return None
        at, length = self._pending.popleft()
        self._pending_bytes -= length
        with open(self.path, "rb") as fh:
            fh.seek(at)
            obj = self._decode(fh.read(length), at - _FRAME.size)
        cols = event_columns_of(obj, at - _FRAME.size, self.path)
        try:
            chunk = self._decoder.decode(cols)
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{self.path}: event frame at byte {at} is malformed: {exc}") from None
        self._events_seen += len(chunk)
        return chunk
