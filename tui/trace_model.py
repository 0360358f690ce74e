"""The pure data behind the dashboard: the timeline, and what every panel shows at a time.

Why this module exists: widgets must be dumb renderers of values carried in the trace, so
everything that decides *what* a panel says at the cursor's time is here, as plain functions
and frozen records, testable without a terminal. Nothing here reads a clock or does I/O.

Lookups are O(log n): the timeline keeps its sample times in one sorted numpy array and a
seek is one `searchsorted`; charts over the whole run take one more `searchsorted` per
column edge. Appending (a followed run) grows the arrays by doubling, so it is amortized O(1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from taskfuse.core.states import BatchStatus, TaskStatus, derive_batch_status
from taskfuse.trace import BREAKER_CODES
from tui.taskindex import STATES, AlertRow, EventChunk, TaskIndex

if TYPE_CHECKING:
    from tui.sources import TraceSource

TERMINAL_STATES: tuple[str, ...] = STATES[2:]
BREAKER_NAMES: dict[int, str] = {code: name for name, code in BREAKER_CODES.items()}
#: Resolution of the charts a snapshot carries; widgets pool them down to their width.
CHART_COLUMNS = 240
#: The subject of the business gateway's BREAKER events (its timeline code is biz.breaker).
GATEWAY = "gateway"
SPEEDS: tuple[float, ...] = (0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_BLOCKS = " ▁▂▃▄▅▆▇█"


def _num(x: float) -> float | None:
    """NaN (a null in the trace) becomes None so renderers can say "–"."""
    return None if x is None or math.isnan(x) else float(x)


class Timeline:
    """The sampled series of a trace, appendable, with sample-and-hold lookups by time."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._col = {name: i for i, name in enumerate(self.names)}
        self._t = np.empty(0)
        self._v = np.empty((0, len(self.names)))
        self.n = 0

    @property
    def times(self) -> np.ndarray:
        return self._t[: self.n]

    def has(self, name: str) -> bool:
        return name in self._col

    def column(self, name: str) -> np.ndarray:
        return self._v[: self.n, self._col[name]]

    def append(self, t: np.ndarray, rows: np.ndarray) -> None:
        """Add samples (rows in header order); grows capacity by doubling."""
        k = len(t)
        if k == 0:
            return
        need = self.n + k
        if need > len(self._t):
            cap = max(need, 2 * len(self._t), 64)
            t_new, v_new = np.empty(cap), np.full((cap, len(self.names)), np.nan)
            t_new[: self.n], v_new[: self.n] = self.times, self._v[: self.n]
            self._t, self._v = t_new, v_new
        self._t[self.n : need] = t
        self._v[self.n : need] = rows
        self.n = need

    def repeats(self, rows: np.ndarray) -> bool:
        """Do `rows` all equal the latest sample (NaN equal to NaN)? A run that idles keeps
        writing such rows (a real worker samples every second)."""
        if not self.n or not len(rows):
            return False
        return bool(np.array_equal(rows, np.broadcast_to(self._v[self.n - 1], rows.shape),
                                   equal_nan=True))

    def index_at(self, t: float) -> int:
        """Index of the sample in force at `t` (the last one at or before it), -1 if none."""
        return int(np.searchsorted(self.times, t, "right")) - 1

    def value(self, name: str, i: int) -> float | None:
        if i < 0 or name not in self._col:
            return None
        return _num(self._v[i, self._col[name]])

    def max_upto(self, name: str, i: int) -> float | None:
        """The largest value of `name` over samples 0..i (None: no such series or value)."""
        if i < 0 or name not in self._col:
            return None
        vals = self._v[: i + 1, self._col[name]]
        if np.isnan(vals).all():
            return None
        return _num(float(np.nanmax(vals)))

    def chart(self, name: str, i: int, t0: float, t1: float, width: int) -> np.ndarray:
        """Max of `name` per column over [t0, t1], NaN after sample `i` (the cursor).

        Columns with no sample hold the previous column's value, so a sparse timeline still
        draws a continuous line.
        """
        out = np.full(width, np.nan)
        if i < 0 or name not in self._col or t1 <= t0:
            return out
        vals = self._v[: i + 1, self._col[name]]
        times = self._t[: i + 1]
        edges = np.linspace(t0, t1, width + 1)
        starts = np.searchsorted(times, edges[:-1], "left")
        ends = np.searchsorted(times, edges[1:], "left")
        ends[-1] = len(times)
        full = ends > starts
        if full.any():
            with np.errstate(invalid="ignore"):
                out[full] = np.fmax.reduceat(vals, starts[full])
        last = int(np.searchsorted(edges, times[-1], "right")) - 1
        _hold(out, min(last, width - 1))
        return out


def _hold(values: np.ndarray, upto: int) -> None:
    """Forward-fill NaN gaps up to column `upto`, in place (sample-and-hold)."""
    prev = np.nan
    for k in range(upto + 1):
        if math.isnan(values[k]):
            values[k] = prev
        else:
            prev = values[k]


def fit(values: np.ndarray, width: int) -> np.ndarray:
    """Pool a chart down (max per group) or pad it to `width` columns."""
    n = len(values)
    if width <= 0:
        return np.empty(0)
    if n <= width:
        return np.concatenate([values, np.full(width - n, np.nan)])
    edges = np.linspace(0, n, width + 1).astype(int)
    out = np.full(width, np.nan)
    for k in range(width):
        seg = values[edges[k] : max(edges[k + 1], edges[k] + 1)]
        if not np.isnan(seg).all():
            out[k] = np.nanmax(seg)
    return out


def bars(values: np.ndarray, height: int, top: float | None = None) -> list[str]:
    """Block-character bar chart rows (top row first); NaN columns stay blank."""
    finite = values[~np.isnan(values)]
    scale = top if top else (float(finite.max()) if len(finite) else 0.0)
    rows = []
    levels = np.zeros(len(values), dtype=int)
    if scale > 0:
        with np.errstate(invalid="ignore"):
            eighths = np.clip(np.nan_to_num(values) / scale, 0, 1) * height * 8
        levels = np.ceil(eighths).astype(int)
        levels[(values > 0) & (levels == 0)] = 1
    for row in range(height - 1, -1, -1):
        cell = np.clip(levels - row * 8, 0, 8)
        line = "".join(_BLOCKS[c] for c in cell)
        rows.append(line)
    if rows:
        blank = np.isnan(values)
        rows[-1] = "".join(" " if b else ch for ch, b in zip(rows[-1], blank, strict=True))
    return rows


def log_scale(values: np.ndarray, floor: float) -> np.ndarray:
    """Latencies for a bar chart: decades above `floor` (120 ms and 30 s both visible)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.log10(np.maximum(values, floor) / floor) + 0.1
    out[np.isnan(values)] = np.nan
    return out


# -- what the panels show ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)  # carries arrays: compare by identity
class Overview:
    queue_depth: float | None
    running: float | None
    running_limit: float | None
    submitted: float | None
    done: Mapping[str, float | None]
    throughput: float | None
    success_rate: float | None
    queue_chart: np.ndarray = field(repr=False)
    running_chart: np.ndarray = field(repr=False)
    limit_chart: np.ndarray = field(repr=False)
    throughput_chart: np.ndarray | None = field(default=None, repr=False)
    success_chart: np.ndarray | None = field(default=None, repr=False)
    #: The event loop's lag at the cursor and the largest up to it, seconds (None: the run
    #: has no async kind, so its trace has no `loop_lag` series).
    loop_lag: float | None = None
    loop_lag_max: float | None = None


@dataclass(frozen=True, slots=True)
class DownstreamRow:
    name: str
    breaker: str | None  # "closed" / "half_open" / "open", None without a breaker
    reopen_in: float | None
    in_flight: float | None
    limit: float | None
    rps: float | None
    r429: float | None
    r429_rate: float | None
    errors: float | None
    rps_chart: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PoolRow:
    name: str
    in_use: float | None
    waiting: float | None
    size: float | None
    waiting_chart: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True, eq=False)
class Business:
    present: bool
    p50: float | None
    p99: float | None
    slo_p99: float | None
    timeouts: float | None
    breaker: str | None
    p99_chart: np.ndarray = field(repr=False)
    reopen_in: float | None = None  # seconds until the gateway breaker goes half-open

    @property
    def slo_broken(self) -> bool:
        return self.p99 is not None and self.slo_p99 is not None and self.p99 > self.slo_p99


@dataclass(frozen=True, slots=True)
class BatchRow:
    batch_id: str
    counts: Mapping[str, int]
    p99: float | None
    final: bool = True  # False while events up to the cursor are still loading

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.counts.get(s, 0) for s in TERMINAL_STATES)

    @property
    def started(self) -> bool:
        """Has any task of the batch run (or is running)? Cancels of queued tasks don't count."""
        return any(self.counts.get(s, 0) for s in ("RUNNING", "SUCCESS", "FAILED", "TIMEOUT"))

    @property
    def status(self) -> BatchStatus | None:
        if not self.total:
            return None
        return derive_batch_status({TaskStatus(k): v for k, v in self.counts.items()})

    @property
    def label(self) -> str:
        """The status shown: the core's derived status, except PENDING while nothing of a
        batch has started (the core calls that RUNNING: work remains)."""
        status = self.status
        if status is None:
            return "EMPTY"
        if status is BatchStatus.RUNNING and not self.started:
            return "PENDING"
        return status.value


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the dashboard shows at time `t`."""

    t: float
    overview: Overview
    downstreams: tuple[DownstreamRow, ...]
    pools: tuple[PoolRow, ...]
    business: Business
    batches: tuple[BatchRow, ...]
    alerts: tuple[AlertRow, ...]
    alerts_firing: int | None
    alerts_known: bool


def names_with_prefix(series: list[str], prefix: str, ordered: list[str] | None) -> list[str]:
    """Entity names of `prefix.NAME.metric` series, in the header meta's order when given."""
    found: list[str] = []
    for s in series:
        if s.startswith(prefix + "."):
            name = s[len(prefix) + 1 :].rsplit(".", 1)[0]
            if name not in found:
                found.append(name)
    if not ordered:
        return found
    return [n for n in ordered if n in found] + [n for n in found if n not in ordered]


@dataclass(frozen=True, slots=True)
class Meta:
    """The header facts panels need, with entity names derived from the series if missing."""

    scenario: str
    source: str
    seed: Any
    sample_interval: float
    downstreams: tuple[str, ...]
    pools: tuple[str, ...]
    batches: tuple[str, ...]
    workers: float | None
    worker_id: str | None = None

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> Meta:
        series = list(header.get("series", []))
        meta = header.get("meta") or {}
        return cls(
            scenario=str(header.get("scenario") or ""),
            source=str(header.get("source") or "?"),
            seed=header.get("seed"),
            sample_interval=float(header.get("sample_interval_s") or 1.0),
            downstreams=tuple(names_with_prefix(series, "ds", meta.get("downstreams"))),
            pools=tuple(names_with_prefix(series, "pool", meta.get("pools"))),
            batches=tuple(names_with_prefix(series, "batch", meta.get("batches"))),
            workers=meta.get("workers"),
            worker_id=meta.get("worker_id"),
        )

    @property
    def title(self) -> str:
        """What the run is: `incident seed=7` for a simulation, `sync on host:4242` for a
        real worker (a real run has no seed, so none is shown)."""
        name = self.scenario or ("real run" if self.source == "runtime" else "trace")
        if self.worker_id:
            name = f"{name} on {self.worker_id}"
        return name if self.seed is None else f"{name} seed={self.seed}"


@dataclass(frozen=True, slots=True)
class Counts:
    """Tasks by state at a time; `final` is False while events up to it are still loading
    (the numbers are then lower bounds) and `loaded` says how much of the file is read."""

    by_state: Mapping[str, int]
    final: bool
    loaded: float

    @property
    def total(self) -> int:
        return sum(self.by_state.values())


class TraceModel:
    """The monitor's data: a timeline, a task index and the header, grown as reading goes.

    Owned by the UI thread; loading threads hand it `Delta`s and `EventChunk`s in messages.
    """

    def __init__(self, header: Mapping[str, Any]) -> None:
        self.header = dict(header)
        self.meta = Meta.from_header(header)
        self.timeline = Timeline(list(header.get("series", [])))
        self.tasks = TaskIndex()
        self.report: dict[str, Any] | None = None
        self.complete = False
        self.pending_frames = 0
        self.event_bytes = 0  # bytes of event frames located so far
        self.pending_bytes = 0  # of those, not decoded yet

    @classmethod
    def of_source(cls, src: TraceSource) -> TraceModel:
        """A model of everything `src` holds now, read at once: a script's, a test's or a
        benchmark's way (the app reads it in rounds, off its UI thread)."""
        model = cls(src.header)
        if src.first is not None:
            model.add_samples(src.first.times, src.first.rows)
        while (chunk := src.decode_next()) is not None:
            model.add_events(chunk, src.pending_frames)
        return model

    def add_samples(self, times: np.ndarray, rows: np.ndarray) -> None:
        self.timeline.append(times, rows)

    def add_event_frames(self, frames: int, nbytes: int) -> None:
        """Event frames were located in the file (decoded later, in order)."""
        self.pending_frames += frames
        self.event_bytes += nbytes
        self.pending_bytes += nbytes

    def add_events(self, chunk: EventChunk, pending: int, pending_bytes: int | None = None
                   ) -> None:
        self.tasks.extend(chunk)
        self.pending_frames = pending
        if pending_bytes is not None:
            self.pending_bytes = pending_bytes
        elif pending == 0:
            self.pending_bytes = 0

    def finish(self, report: dict[str, Any] | None) -> None:
        self.report, self.complete = report, True

    @property
    def events_loaded(self) -> bool:
        return self.pending_frames == 0

    @property
    def loaded(self) -> float:
        """Share of the event bytes located so far that are decoded (1.0 when all are)."""
        if self.events_loaded or not self.event_bytes:
            return 1.0
        return 1.0 - self.pending_bytes / self.event_bytes

    def final_at(self, t: float) -> bool:
        """Are all events at or before `t` loaded? (Events are written in time order.)"""
        return self.events_loaded or (self.tasks.last_t or -math.inf) > t

    def counts_at(self, t: float) -> Counts:
        return Counts(self.tasks.counts_at(t), self.final_at(t), self.loaded)

    @property
    def span(self) -> tuple[float, float]:
        """First and last time anything happened (samples or events seen so far)."""
        times = self.timeline.times
        t0 = float(times[0]) if len(times) else 0.0
        t1 = float(times[-1]) if len(times) else t0
        last = self.tasks.last_t
        if last is not None:
            t1 = max(t1, last)
        return min(t0, 0.0), t1

    def snapshot(self, t: float, width: int = CHART_COLUMNS) -> Snapshot:
        loaded = self.final_at(t) or (self.tasks.last_t or -math.inf) >= t
        alerts = self.tasks.alerts_at(t) if loaded else None
        snap = snapshot(self.timeline, self.meta, t, self.span, alerts, width)
        if not snap.batches and self.tasks.words["batch_id"]:
            snap = replace(snap, batches=self._event_batches(t))
        return self._exact_breakers(snap, t) if loaded else snap

    def _event_batches(self, t: float) -> tuple[BatchRow, ...]:
        """Batches counted from events (a trace without batch series, e.g. a real worker's)."""
        final = self.final_at(t)
        return tuple(BatchRow(name, counts, p99, final)
                     for name, (counts, p99) in self.tasks.batches_at(t).items()
                     if sum(counts.values()))

    def _exact_breakers(self, snap: Snapshot, t: float) -> Snapshot:
        """Breaker states from BREAKER events where the trace has them: a sample can be up
        to one interval late, an event is not. Where no sample says when an open breaker
        goes half-open, the next BREAKER event does (a replay knows it; a live run not yet)."""
        at = self.tasks.breaker_at
        ds = tuple(
            replace(d, breaker=state,
                    reopen_in=(d.reopen_in if d.reopen_in is not None
                               else self._reopen_in(d.name, t)) if state == "open" else None)
            if (state := at(d.name, t)) is not None else d
            for d in snap.downstreams
        )
        gateway = at(GATEWAY, t)
        biz = snap.business
        if gateway is not None:
            reopen = None
            if gateway == "open":
                reopen = biz.reopen_in if biz.reopen_in is not None \
                    else self._reopen_in(GATEWAY, t)
            biz = replace(biz, breaker=gateway, reopen_in=reopen)
        return replace(snap, downstreams=ds, business=biz)

    def _reopen_in(self, subject: str, t: float) -> float | None:
        nxt = self.tasks.breaker_next(subject, t)
        return nxt[0] - t if nxt is not None and nxt[1] == "half_open" else None


def breaker_name(code: float | None) -> str | None:
    return None if code is None else BREAKER_NAMES.get(int(code))


def snapshot(
    tl: Timeline,
    meta: Meta,
    t: float,
    span: tuple[float, float],
    alerts: list[AlertRow] | None = None,
    width: int = CHART_COLUMNS,
) -> Snapshot:
    """What every dashboard panel shows at `t`: one searchsorted plus a few charts."""
    i = tl.index_at(t)
    v = tl.value
    t0, t1 = span

    def chart(name: str) -> np.ndarray:
        return tl.chart(name, i, t0, t1, width)

    limit = v("running_limit", i)
    if limit is None:
        limit = meta.workers
    overview = Overview(
        v("queue_depth", i), v("running", i), limit, v("submitted", i),
        {s: v(f"done.{s}", i) for s in TERMINAL_STATES},
        v("throughput", i), v("success_rate", i),
        chart("queue_depth"), chart("running"), chart("running_limit"),
        chart("throughput"), chart("success_rate"),
        v("loop_lag", i), tl.max_upto("loop_lag", i),
    )
    # Time until half-open is carried at the sample; subtract what has passed since it.
    since = t - float(tl.times[i]) if i >= 0 else 0.0
    ds = tuple(_downstream(tl, i, name, since, chart) for name in meta.downstreams)
    pools = tuple(
        PoolRow(p, v(f"pool.{p}.in_use", i), v(f"pool.{p}.waiting", i), v(f"pool.{p}.size", i),
                chart(f"pool.{p}.waiting"))
        for p in meta.pools
    )
    gateway = breaker_name(v("biz.breaker", i))
    reopen = v("biz.reopen_in", i)  # a writer that records it; else the events tell
    biz = Business(
        any(tl.has(f"biz.{k}") for k in ("p99", "breaker")),
        v("biz.p50", i), v("biz.p99", i), v("biz.slo_p99", i), v("biz.timeouts", i),
        gateway, chart("biz.p99"),
        max(0.0, reopen - since) if reopen is not None and gateway == "open" else None,
    )
    batches = tuple(
        BatchRow(b, {s: int(v(f"batch.{b}.{s}", i) or 0) for s in STATES}, v(f"batch.{b}.p99", i))
        for b in meta.batches
    )
    firing = v("alerts.firing", i)
    return Snapshot(
        t, overview, ds, pools, biz, batches, tuple(alerts or ()),
        None if firing is None else int(firing), alerts is not None,
    )


def _downstream(tl: Timeline, i: int, name: str, since: float,
                chart: Callable[[str], np.ndarray]) -> DownstreamRow:
    v = tl.value
    p = f"ds.{name}."
    breaker = breaker_name(v(p + "breaker", i))
    reopen = v(p + "reopen_in", i)
    if breaker != "open":
        reopen = None
    elif reopen is not None:
        reopen = max(0.0, reopen - since)
    r429, prev = v(p + "r429", i), v(p + "r429", i - 1) if i > 0 else None
    rate = None
    if r429 is not None and prev is not None and i > 0:
        dt = float(tl.times[i] - tl.times[i - 1])
        rate = (r429 - prev) / dt if dt > 0 else None
    return DownstreamRow(
        name, breaker, reopen, v(p + "in_flight", i), v(p + "limit", i), v(p + "rps", i),
        r429, rate, v(p + "errors", i), chart(p + "rps"),
    )


# -- playback ----------------------------------------------------------------------------


def seek_step(span: float) -> float:
    """A round step for left/right: about 1/100 of the run."""
    for step in (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600):
        if step >= span / 100:
            return float(step)
    return 3600.0


def next_speed(speed: float, up: bool) -> float:
    """The next speed on the x0.25 .. x1000 ladder."""
    if up:
        return next((s for s in SPEEDS if s > speed), SPEEDS[-1])
    return next((s for s in reversed(SPEEDS) if s < speed), SPEEDS[0])


def snap_speed(speed: float) -> float:
    """The ladder's speed nearest to `speed` (one of x0.25 .. x1000; see `check_speed`)."""
    return min(SPEEDS, key=lambda s: abs(math.log(s) - math.log(max(speed, 1e-9))))


def check_speed(speed: float) -> float:
    """A `--speed` the ladder holds, snapped to its nearest step; ValueError (one line)
    otherwise: -5, 0, nan and 1e9 used to become x0.25 or x1000 without a word."""
    lo, hi = SPEEDS[0], SPEEDS[-1]
    if not (math.isfinite(speed) and lo <= speed <= hi):
        raise ValueError(f"--speed {speed!r} is out of range: expected a speed from "
                         f"{lo:g} to {hi:g} (x{lo:g} .. x{hi:g})")
    return snap_speed(speed)


@dataclass(frozen=True, slots=True)
class PlayInfo:
    """What the time bar shows: where the cursor is, how it moves, how the source is doing."""

    t: float
    span: tuple[float, float]
    playing: bool
    speed: float
    follow: bool = False
    live: bool = False
    complete: bool = True
    stalled_for: float | None = None
    loaded: float = 1.0  # share of the event bytes decoded so far
    title: str = ""
    error: str | None = None
