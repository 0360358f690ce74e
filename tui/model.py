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
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from taskfuse.core.states import BatchStatus, TaskStatus, derive_batch_status
from taskfuse.trace import BREAKER_CODES
from tui.taskindex import STATES, AlertRow, EventChunk, TaskIndex

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

    def index_at(self, t: float) -> int:
        """Index of the sample in force at `t` (the last one at or before it), -1 if none."""
        return int(np.searchsorted(self.times, t, "right")) - 1

    def value(self, name: str, i: int) -> float | None:
        if i < 0 or name not in self._col:
            return None
        return _num(self._v[i, self._col[name]])

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


@dataclass(frozen=True, slots=True)
class PoolRow:
    name: str
    in_use: float | None
    waiting: float | None
    size: float | None


@dataclass(frozen=True, slots=True, eq=False)
class Business:
    present: bool
    p50: float | None
    p99: float | None
    slo_p99: float | None
    timeouts: float | None
    breaker: str | None
    p99_chart: np.ndarray = field(repr=False)

    @property
    def slo_broken(self) -> bool:
        return self.p99 is not None and self.slo_p99 is not None and self.p99 > self.slo_p99


@dataclass(frozen=True, slots=True)
class BatchRow:
    batch_id: str
    counts: Mapping[str, int]
    p99: float | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.counts.get(s, 0) for s in TERMINAL_STATES)

    @property
    def status(self) -> BatchStatus | None:
        if not self.total:
            return None
        return derive_batch_status({TaskStatus(k): v for k, v in self.counts.items()})


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

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> Meta:
        series = list(header.get("series", []))
        meta = header.get("meta") or {}
        return cls(
            scenario=str(header.get("scenario") or "trace"),
            source=str(header.get("source") or "?"),
            seed=header.get("seed"),
            sample_interval=float(header.get("sample_interval_s") or 1.0),
            downstreams=tuple(names_with_prefix(series, "ds", meta.get("downstreams"))),
            pools=tuple(names_with_prefix(series, "pool", meta.get("pools"))),
            batches=tuple(names_with_prefix(series, "batch", meta.get("batches"))),
            workers=meta.get("workers"),
        )


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

    def add_samples(self, times: np.ndarray, rows: np.ndarray) -> None:
        self.timeline.append(times, rows)

    def add_events(self, chunk: EventChunk, pending: int) -> None:
        self.tasks.extend(chunk)
        self.pending_frames = pending

    def finish(self, report: dict[str, Any] | None) -> None:
        self.report, self.complete = report, True

    @property
    def events_loaded(self) -> bool:
        return self.pending_frames == 0

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
        loaded = self.events_loaded or (self.tasks.last_t or -math.inf) >= t
        alerts = self.tasks.alerts_at(t) if loaded else None
        snap = snapshot(self.timeline, self.meta, t, self.span, alerts, width)
        return self._exact_breakers(snap, t) if loaded else snap

    def _exact_breakers(self, snap: Snapshot, t: float) -> Snapshot:
        """Breaker states from BREAKER events where the trace has them: a sample can be up
        to one interval late, an event is not."""
        at = self.tasks.breaker_at
        ds = tuple(
            replace(d, breaker=state, reopen_in=d.reopen_in if state == "open" else None)
            if (state := at(d.name, t)) is not None else d
            for d in snap.downstreams
        )
        gateway = at(GATEWAY, t)
        biz = snap.business if gateway is None else replace(snap.business, breaker=gateway)
        return replace(snap, downstreams=ds, business=biz)


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
    limit = v("running_limit", i)
    if limit is None:
        limit = meta.workers
    overview = Overview(
        v("queue_depth", i), v("running", i), limit, v("submitted", i),
        {s: v(f"done.{s}", i) for s in TERMINAL_STATES},
        v("throughput", i), v("success_rate", i),
        tl.chart("queue_depth", i, t0, t1, width), tl.chart("running", i, t0, t1, width),
        tl.chart("running_limit", i, t0, t1, width),
    )
    # Time until half-open is carried at the sample; subtract what has passed since it.
    since = t - float(tl.times[i]) if i >= 0 else 0.0
    ds = tuple(_downstream(tl, i, name, since) for name in meta.downstreams)
    pools = tuple(
        PoolRow(p, v(f"pool.{p}.in_use", i), v(f"pool.{p}.waiting", i), v(f"pool.{p}.size", i))
        for p in meta.pools
    )
    biz = Business(
        any(tl.has(f"biz.{k}") for k in ("p99", "breaker")),
        v("biz.p50", i), v("biz.p99", i), v("biz.slo_p99", i), v("biz.timeouts", i),
        breaker_name(v("biz.breaker", i)), tl.chart("biz.p99", i, t0, t1, width),
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


def _downstream(tl: Timeline, i: int, name: str, since: float) -> DownstreamRow:
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
        r429, rate, v(p + "errors", i),
    )


# -- time and commands -------------------------------------------------------------------


def fmt_t(t: float | None) -> str:
    """A trace time as h:mm:ss.s (or m:ss.s) — what a person types back into `:`."""
    if t is None or math.isnan(t):
        return "–"
    sign = "-" if t < 0 else ""
    t = abs(t)
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{sign}{int(h)}:{int(m):02d}:{s:04.1f}"
    return f"{sign}{int(m)}:{s:04.1f}"


def fmt_num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "–"
    if abs(x) >= 10_000:
        return f"{x / 1000:.0f}k"
    return f"{x:.{digits}f}"


def fmt_s(x: float | None) -> str:
    """Seconds, short: 30s, 2.5s, 120ms."""
    if x is None:
        return "–"
    if x < 1:
        return f"{x * 1000:.0f}ms"
    return f"{x:.1f}s" if x < 100 else f"{x:.0f}s"


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
    return min(SPEEDS, key=lambda s: abs(math.log(s) - math.log(max(speed, 1e-9))))


VIEWS = {"dash": "dashboard", "dashboard": "dashboard", "d": "dashboard",
         "tasks": "tasks", "task": "tasks", "t": "tasks", "help": "help", "h": "help"}
_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+(?:\.\d*)?)$")


@dataclass(frozen=True, slots=True)
class Command:
    """What a `:` line asks for: a view, a time, a task, or quit; `error` when unreadable."""

    view: str | None = None
    t: float | None = None
    task: str | None = None
    quit: bool = False
    error: str | None = None


def parse_command(text: str, now: float, span: tuple[float, float]) -> Command:
    """Read a `:` line like k9s does: a view name, or a time (`90`, `1:30`, `+10`, `50%`)."""
    s = text.strip()
    low = s.lower()
    if low in ("q", "quit", "q!"):
        return Command(quit=True)
    if low in VIEWS:
        return Command(view=VIEWS[low])
    if low in ("start", "home", "begin"):
        return Command(t=span[0])
    if low in ("end", "live"):
        return Command(t=span[1])
    if low.startswith("task ") and s[5:].strip():
        return Command(task=s[5:].strip())
    t = parse_time(low, now, span)
    if t is None:
        return Command(error=f"not a view or a time: {s!r} (try 90, 1:30, +10, 50%, tasks)")
    return Command(t=t)


def parse_time(s: str, now: float, span: tuple[float, float]) -> float | None:
    """`90`, `90s`, `1:30`, `1:02:03`, `5m`, `+10`/`-10` (relative), `50%` (of the run)."""
    s = s.strip().replace(" ", "")
    if not s:
        return None
    if s.endswith("%"):
        try:
            return span[0] + (span[1] - span[0]) * float(s[:-1]) / 100.0
        except ValueError:
            return None
    rel = s[0] in "+-"
    body = s[1:] if rel else s
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(body[-1:])
    try:
        if unit is not None:
            secs = float(body[:-1]) * unit
        elif m := _CLOCK.match(body):
            secs = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        else:
            secs = float(body)
    except ValueError:
        return None
    if rel:
        return now + secs if s[0] == "+" else now - secs
    return secs


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
    loading: int = 0  # event frames still to decode
    title: str = ""
    error: str | None = None
