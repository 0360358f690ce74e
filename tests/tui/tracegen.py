"""A synthetic, incident-shaped trace for the monitor's tests and benchmarks.

Why not the lab: the monitor must be testable on its own, with a trace whose facts are known
exactly (when the gateway breaker opens and closes, how many tasks end in each state), and the
benchmarks need a 1,000,000-task trace that builds in seconds rather than minutes. This module
runs a tiny queueing model (FIFO by readiness over `workers` servers) and writes what a lab run
would: SUBMIT/MOVE/CALL/WAIT/BREAKER/ALERT events and the standard timeline series, all
derived from the same event arrays so panels and the task table must agree.

The story, scaled to the run's length: a downstream `partner` starts failing (429s, timeouts),
its breaker trips and the gateway's breaker (`biz.breaker`) trips shortly after while the
shared DB pool starves; both close again later. Tasks retry with backoff, some fail for good,
a few are canceled while pending and one times out.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from taskfuse.trace import BREAKER_CODES, TraceWriter

STATES = ("PENDING", "RUNNING", "SUCCESS", "FAILED", "TIMEOUT", "CANCELED")
MAX_RETRY = 3


@dataclass(frozen=True)
class Incident:
    """The known facts of a generated trace, for tests to seek to and assert on."""

    path: Path
    n_tasks: int
    n_events: int
    t_end: float
    gateway_open: float
    gateway_half_open: float
    gateway_closed: float
    partner_open: float
    partner_half_open: float
    partner_closed: float
    final_counts: dict[str, int]
    batches: tuple[str, ...]
    task_ids: tuple[str, ...] = field(repr=False)
    trace_of: dict[str, str] = field(repr=False)


def _series_names(batches: tuple[str, ...]) -> list[str]:
    names = ["queue_depth", "running", "running_limit", "submitted"]
    names += [f"done.{s}" for s in STATES[2:]]
    names += ["throughput", "success_rate", "alerts.firing"]
    names += [f"ds.partner.{k}" for k in
              ("in_flight", "limit", "rps", "r429", "errors", "breaker", "reopen_in", "tokens")]
    for pool in ("shared", "batch"):
        names += [f"pool.{pool}.{k}" for k in ("in_use", "waiting", "size")]
    names += ["biz.p50", "biz.p99", "biz.slo_p99", "biz.timeouts", "biz.breaker"]
    for b in batches:
        names += [f"batch.{b}.{s}" for s in STATES] + [f"batch.{b}.p99"]
    return names


class _Events:
    """Column lists of events, appended in any order and sorted by time at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, t: float, kind: str, task: str | None = None, batch: str | None = None,
            trace: str | None = None, src: str | None = None, dst: str | None = None,
            reason: str | None = None, attempt: int | None = None, worker: str | None = None,
            subject: str | None = None, value: float | None = None) -> None:
        self.rows.append((round(t, 6), kind, task, batch, trace, src, dst, reason, attempt,
                          worker, subject, value))


def _simulate(n: int, workers: int, rng: np.random.Generator, story: dict[str, float],
              batches: tuple[str, ...], ev: _Events, ids: list[str], trace_id: str
              ) -> dict[str, int]:
    """Run the queue; add every task event to `ev`; return final counts by state."""
    per_batch = math.ceil(n / len(batches))
    stagger = story["stagger"]
    batch_of = [batches[i // per_batch] for i in range(n)]
    group = np.cumsum(rng.integers(1, 4, n)) // 2  # 1..3 tasks share a trace id (a SKU)
    durations = rng.lognormal(math.log(story["mean"]), 0.35, n)
    fail_draw = rng.random(n * (MAX_RETRY + 1))
    canceled = set(rng.choice(n, max(1, n // 200), replace=False).tolist())
    timeout_task = n // 2
    counts = dict.fromkeys(STATES, 0)
    ready: list[tuple[float, int, int, int]] = []  # (ready at, seq, task, attempt)
    for i in range(n):
        t_sub = batches.index(batch_of[i]) * stagger
        trace = trace_id.format(group[i])
        ev.add(t_sub, "submit", ids[i], batch_of[i], trace, None, "PENDING", None, 1)
        if i in canceled:
            ev.add(t_sub + 5.0, "move", ids[i], batch_of[i], trace, "PENDING", "CANCELED",
                   "expired: pending longer than its max age", 1)
            counts["CANCELED"] += 1
            continue
        heapq.heappush(ready, (t_sub, i, i, 1))
    free = [(0.0, w) for w in range(workers)]
    seq = n
    bad_from, bad_to = story["partner_bad"], story["partner_closed"]
    while ready:
        t_ready, _, i, attempt = heapq.heappop(ready)
        t_free, w = heapq.heappop(free)
        start = max(t_ready, t_free)
        trace = trace_id.format(group[i])
        b, tid, wid = batch_of[i], ids[i], f"w{w:03d}"
        ev.add(start, "move", tid, b, trace, "PENDING", "RUNNING", "claim", attempt, wid)
        bad = bad_from <= start < bad_to
        dur = float(durations[i]) * (2.5 if bad else 1.0)
        if bad:
            wait = 0.2 + float(fail_draw[i]) * 1.5
            ev.add(start + 0.01, "wait", tid, b, trace, None, None, "pool shared", attempt,
                   wid, "pool.shared", round(wait, 3))
        end = start + dur
        heapq.heappush(free, (end, w))
        if i == timeout_task:
            ev.add(end, "move", tid, b, trace, "RUNNING", "TIMEOUT", "deadline 30.0s passed",
                   attempt, wid)
            counts["TIMEOUT"] += 1
            continue
        fails = bad and fail_draw[i * (MAX_RETRY + 1) + attempt - 1] < 0.85
        draw = float(fail_draw[i])
        outcome = ("429" if draw < 0.5 else "timeout" if draw < 0.8 else "400") if fails else "ok"
        ev.add(end, "call", tid, b, trace, None, None, outcome, attempt, wid, "partner",
               round(dur, 4))
        if not fails:
            ev.add(end, "move", tid, b, trace, "RUNNING", "SUCCESS", "ok", attempt, wid)
            counts["SUCCESS"] += 1
        elif attempt <= MAX_RETRY and outcome != "400":
            delay = round(min(2.0 ** attempt, 30.0) * (0.5 + fail_draw[i] / 2), 3)
            ev.add(end, "move", tid, b, trace, "RUNNING", "PENDING",
                   f"retry {attempt}/{MAX_RETRY} in {delay}s: {outcome}", attempt, wid)
            seq += 1
            heapq.heappush(ready, (end + delay, seq, i, attempt + 1))
        else:
            ev.add(end, "move", tid, b, trace, "RUNNING", "FAILED",
                   "not retryable: 400" if outcome == "400" else f"attempts exhausted: {outcome}",
                   attempt, wid)
            counts["FAILED"] += 1
    return counts


def _story(n: int, workers: int, mean: float, batches: int, healthy: bool) -> dict[str, float]:
    est = n * mean / workers  # makespan without the incident, roughly
    s = {"mean": mean, "stagger": est / (batches * 2)}
    if healthy:  # the fixed configuration: nothing trips, ever
        return s | dict.fromkeys(
            ("partner_bad", "partner_open", "partner_half_open", "partner_closed",
             "gateway_open", "gateway_half_open", "gateway_closed"), math.inf)
    s |= {"partner_bad": 0.25 * est, "partner_open": 0.27 * est,
          "partner_half_open": 0.45 * est, "partner_closed": 0.60 * est,
          "gateway_open": 0.30 * est, "gateway_half_open": 0.50 * est,
          "gateway_closed": 0.62 * est}
    return s


def _breaker_events(ev: _Events, s: dict[str, float]) -> None:
    if math.isinf(s["partner_open"]):
        return
    for name, key in (("partner", "partner"), ("gateway", "gateway")):
        o, h, c = s[f"{key}_open"], s[f"{key}_half_open"], s[f"{key}_closed"]
        ev.add(o, "breaker", src="closed", dst="open", reason="failure rate 0.7 >= 0.5",
               subject=name)
        ev.add(h, "breaker", src="open", dst="half_open", reason="open wait elapsed",
               subject=name)
        ev.add(c, "breaker", src="half_open", dst="closed", reason="probes succeeded",
               subject=name)


def _alerts(s: dict[str, float]) -> list[tuple[str, float, float, float]]:
    """(rule, fired at, resolved at, value)."""
    if math.isinf(s["partner_open"]):
        return []
    return [
        ("success_rate_low", s["partner_open"] + 1.0, s["partner_closed"] + 5.0, 0.62),
        ("queue_depth_high", s["gateway_open"], s["gateway_closed"] + 10.0, 812.0),
    ]


def _code_at(t: np.ndarray, o: float, h: float, c: float) -> np.ndarray:
    code = np.full(t.shape, BREAKER_CODES["closed"], float)
    code[(t >= o) & (t < h)] = BREAKER_CODES["open"]
    code[(t >= h) & (t < c)] = BREAKER_CODES["half_open"]
    return code


def _count_at(ts: np.ndarray, enter: np.ndarray, leave: np.ndarray) -> np.ndarray:
    return (np.searchsorted(np.sort(enter), ts, "right")
            - np.searchsorted(np.sort(leave), ts, "right")).astype(float)


def _timeline(cols: list[list], ts: np.ndarray, s: dict[str, float], workers: int,
              batches: tuple[str, ...], dt: float) -> dict[str, np.ndarray]:
    t = np.asarray(cols[0], float)
    kind = np.asarray(cols[1], object)
    src, dst = np.asarray(cols[5], object), np.asarray(cols[6], object)
    batch, reason = np.asarray(cols[3], object), np.asarray(cols[7], object)
    trans = (kind == "move") | (kind == "submit")
    out: dict[str, np.ndarray] = {}
    per_batch = {b: batch == b for b in batches}
    for st in STATES:
        enter, leave = trans & (dst == st), trans & (src == st)
        out[st] = _count_at(ts, t[enter], t[leave])
        for b, m in per_batch.items():
            out[f"batch.{b}.{st}"] = _count_at(ts, t[enter & m], t[leave & m])
    out["queue_depth"], out["running"] = out["PENDING"], out["RUNNING"]
    out["running_limit"] = np.full(ts.shape, float(workers))
    out["submitted"] = np.searchsorted(np.sort(t[kind == "submit"]), ts, "right").astype(float)
    terminal = sum(out[st] for st in STATES[2:])
    for st in STATES[2:]:
        out[f"done.{st}"] = out[st]
    out["throughput"] = np.diff(terminal, prepend=0.0) / dt
    with np.errstate(invalid="ignore", divide="ignore"):
        out["success_rate"] = out["SUCCESS"] / (out["SUCCESS"] + out["FAILED"])
    alerts = _alerts(s)
    out["alerts.firing"] = sum((((ts >= f) & (ts < r)).astype(float) for _, f, r, _ in alerts),
                               np.zeros(ts.shape))
    calls = kind == "call"
    call_t = np.sort(t[calls])
    n_calls = np.searchsorted(call_t, ts, "right").astype(float)
    limit = 14.0
    out["ds.partner.in_flight"] = np.minimum(out["running"], limit)
    out["ds.partner.limit"] = np.full(ts.shape, limit)
    out["ds.partner.rps"] = np.diff(n_calls, prepend=0.0) / dt
    out["ds.partner.r429"] = _count_at(ts, t[calls & (reason == "429")], np.empty(0))
    out["ds.partner.errors"] = _count_at(ts, t[calls & (reason != "ok")], np.empty(0))
    out["ds.partner.breaker"] = _code_at(ts, s["partner_open"], s["partner_half_open"],
                                         s["partner_closed"])
    with np.errstate(invalid="ignore"):
        reopen = np.where(out["ds.partner.breaker"] == BREAKER_CODES["open"],
                          s["partner_half_open"] - ts, np.nan)
    out["ds.partner.reopen_in"] = reopen
    out["ds.partner.tokens"] = np.clip(100.0 - out["ds.partner.rps"], 0, 100)
    storm = (ts >= s["partner_bad"]) & (ts < s["gateway_closed"])
    biz_load = np.where(storm, 12.0, 4.0)
    out["pool.shared.size"] = np.full(ts.shape, 20.0)
    out["pool.shared.in_use"] = np.minimum(20.0, out["running"] + biz_load)
    out["pool.shared.waiting"] = np.maximum(0.0, out["running"] + biz_load - 20.0)
    out["pool.batch.size"] = np.full(ts.shape, 10.0)
    out["pool.batch.in_use"] = np.minimum(10.0, out["running"] / 2)
    out["pool.batch.waiting"] = np.zeros(ts.shape)
    out["biz.p50"] = np.where(storm, 2.0, 0.05)
    out["biz.p99"] = np.where(storm, 30.0, 0.12)
    out["biz.slo_p99"] = np.full(ts.shape, 0.5)
    out["biz.timeouts"] = np.cumsum(np.where(storm, 3.0, 0.0))
    out["biz.breaker"] = _code_at(ts, s["gateway_open"], s["gateway_half_open"],
                                  s["gateway_closed"])
    ends = trans & np.isin(src, ["RUNNING"])
    for b, m in per_batch.items():
        out[f"batch.{b}.p99"] = _p99_windows(t[ends & m], ts, dt * 30)
    return out


def _p99_windows(end_t: np.ndarray, ts: np.ndarray, window: float) -> np.ndarray:
    """A stand-in for p99 duration: grows with how many attempts ended in the window."""
    ends = np.sort(end_t)
    n = (np.searchsorted(ends, ts, "right") - np.searchsorted(ends, ts - window, "right"))
    return np.where(n > 0, 0.5 + np.log1p(n) / 4, np.nan)


def write_incident_trace(
    path: str | Path,
    n_tasks: int = 300,
    *,
    workers: int = 8,
    mean_s: float = 2.0,
    n_batches: int = 3,
    sample_interval: float = 1.0,
    seed: int = 7,
    flush_every: int = 20_000,
    complete: bool = True,
    healthy: bool = False,
    task_id: str = "t{:07d}",
    trace_id: str = "tr-{:07d}",
) -> Incident:
    """Write an incident-shaped trace to `path` and return its known facts. `task_id` and
    `trace_id` format the ids from a task's index and its trace's (1-3 tasks share one)."""
    rng = np.random.default_rng(seed)
    batches = tuple(f"b{i + 1}" for i in range(n_batches))
    s = _story(n_tasks, workers, mean_s, n_batches, healthy)
    ev = _Events()
    ids = [task_id.format(i) for i in range(n_tasks)]
    counts = _simulate(n_tasks, workers, rng, s, batches, ev, ids, trace_id)
    _breaker_events(ev, s)
    for rule, fired, resolved, value in _alerts(s):
        ev.add(fired, "alert", dst="firing", subject=rule, value=value)
        ev.add(resolved, "alert", dst="resolved", subject=rule, value=value)
    ev.rows.sort(key=lambda r: r[0])
    cols = [list(c) for c in zip(*ev.rows, strict=True)]
    t_end = float(cols[0][-1])
    ts = np.arange(0.0, t_end + sample_interval, sample_interval)
    names = _series_names(batches)
    series = _timeline(cols, ts, s, workers, batches, sample_interval)
    matrix = np.column_stack([series[nm] for nm in names])
    header = {
        "source": "lab", "scenario": "synthetic-fixed" if healthy else "synthetic-incident",
        "seed": seed, "series": names,
        "sample_interval_s": sample_interval,
        "meta": {"downstreams": ["partner"], "pools": ["shared", "batch"],
                 "batches": list(batches), "workers": workers,
                 "slo": {"biz_p99_s": 0.5}},
    }
    writer = TraceWriter(path, header, flush_every=flush_every)
    ev_t, rows, j = cols[0], ev.rows, 0
    for k, tk in enumerate(ts.tolist()):
        while j < len(rows) and ev_t[j] <= tk:
            writer.event(rows[j])
            j += 1
        writer.sample(tk, [None if math.isnan(v) else v for v in matrix[k].tolist()])
    for row in rows[j:]:
        writer.event(row)
    if complete:
        writer.close({"makespan_s": t_end, "outcomes": counts})
    else:
        writer.abort()
    tasks = [r for r in rows if r[1] == "submit"]
    return Incident(
        Path(path), n_tasks, len(rows), t_end,
        s["gateway_open"], s["gateway_half_open"], s["gateway_closed"],
        s["partner_open"], s["partner_half_open"], s["partner_closed"], counts, batches,
        tuple(r[2] for r in tasks), {r[2]: r[4] for r in tasks},
    )
