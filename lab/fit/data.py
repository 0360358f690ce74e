"""A recorded run as flat numpy columns: the calls, DB steps, submits and attempts `lab fit` reads.

Everything is in the trace's own seconds (a load test writes scenario seconds). A call's
start is its end minus its latency (CALL events are written when a call ends). Events this
module relies on are those of `taskfuse.core.events` as the runtime emits them, plus the DB
events a load test adds (`lab.loadtest.record`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lab.loadtest.record import KEPT
from taskfuse.core.events import THREAD_WAIT
from taskfuse.trace import Trace, read_trace

OK = "ok"
HTTP_429 = "http_429"
TIMEOUT = "timeout"


@dataclass
class Calls:
    """Every request to one downstream, ordered by start."""

    start: np.ndarray
    end: np.ndarray
    outcome: np.ndarray  # object: "ok" or the error kind
    task: np.ndarray  # object: task id (None outside tasks)
    attempt: np.ndarray  # int: the task's attempt (0 when unknown)

    @property
    def latency(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return len(self.start)

    def where(self, mask: np.ndarray | slice) -> Calls:
        return Calls(self.start[mask], self.end[mask], self.outcome[mask], self.task[mask],
                     self.attempt[mask])


@dataclass
class DbStep:
    """One DB step of a task: its pool, wait, query and whether the task kept the connection."""

    pool: str
    task: str
    batch: str | None
    attempt: int
    asked: float  # when the connection was asked for
    waited: float
    query: float
    kept: bool  # held until the task ended


@dataclass
class Attempt:
    """One run of a task: claimed at `start`, ended at `end` with `status` (None: unfinished).
    A prefetched attempt waited `waited` seconds for a worker thread before its code began
    (a timeout still counts from the claim)."""

    task: str
    batch: str | None
    attempt: int
    start: float
    end: float | None = None
    status: str | None = None
    reason: str | None = None  # why it ended (the MOVE's reason)
    waited: float = 0.0

    @property
    def began(self) -> float:
        """When its code began: the claim, plus its wait for a thread."""
        return self.start + self.waited


@dataclass
class RunData:
    """What the estimators read; `limits` and `gateway` are None when the trace lacks them."""

    path: Path
    source: str
    header: dict[str, Any]
    report: dict[str, Any] | None
    trace: Trace
    calls: dict[str, Calls]
    db: list[DbStep]
    submits: dict[str, np.ndarray]
    attempts: list[Attempt]
    end_t: float
    limits: dict[str, Any] | None = None
    gateway: dict[str, Any] | None = None
    bulkhead_waits: dict[tuple[str, int, str], float] = field(default_factory=dict)
    #: Tasks the trace saw move but never saw submitted (a worker's trace of work that was
    #: waiting when it started, or that another process submitted): taken as submitted at 0.
    unsubmitted: int = 0
    #: Business requests (no task): per pool, (asked at, waited) and query seconds.
    business_asks: dict[str, np.ndarray] = field(default_factory=dict)
    business_queries: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.header.get("meta") or {})

    @property
    def time_scale(self) -> float:
        return float(self.meta.get("time_scale") or 1.0)


def load_run(path: str | Path) -> RunData:
    """Read a trace (raises taskfuse.trace.TraceError on a bad one) into RunData."""
    tr = read_trace(path)
    cols = tr.event_columns
    n = tr.n_events
    t = np.asarray(cols[0], dtype=float) if n else np.zeros(0)
    kind, task, batch, src, dst, reason, attempt, subject, value = (
        cols[i] if n else [] for i in (1, 2, 3, 5, 6, 7, 8, 10, 11))
    calls: dict[str, list[tuple[float, float, str, Any, int]]] = defaultdict(list)
    submits: dict[str, list[float]] = defaultdict(list)
    grants: dict[tuple[Any, Any, str], list[tuple[float, float]]] = defaultdict(list)
    db: list[DbStep] = []
    biz_asks: dict[str, list[float]] = defaultdict(list)
    biz_queries: dict[str, list[float]] = defaultdict(list)
    open_attempts: dict[str, Attempt] = {}
    attempts: list[Attempt] = []
    bulkhead: dict[tuple[str, int, str], float] = {}
    seen: set[Any] = set()  # tasks submitted, or first seen moving
    unsubmitted: dict[str, int] = defaultdict(int)
    meta = tr.header.get("meta") or {}
    for i in range(n):
        k = kind[i]
        if k == "query":
            if task[i] is None:
                biz_queries[subject[i]].append(float(value[i] or 0.0))
            else:
                db.append(_db_step(grants, t[i], task[i], batch[i], attempt[i], subject[i],
                                   float(value[i] or 0.0), reason[i] == KEPT))
        elif k == "call":
            lat = float(value[i] or 0.0)
            calls[subject[i]].append((t[i] - lat, t[i], reason[i] or OK, task[i],
                                      int(attempt[i] or 0)))
        elif k == "wait":
            if reason[i] == "pool" and task[i] is None:
                biz_asks[subject[i]].append(t[i] - float(value[i] or 0.0))
            elif reason[i] == "pool":
                grants[(task[i], attempt[i], subject[i])].append((t[i], float(value[i] or 0.0)))
            elif reason[i] == THREAD_WAIT and task[i] in open_attempts:
                open_attempts[task[i]].waited += float(value[i] or 0.0)
            elif reason[i] == "bulkhead" and task[i] is not None:
                key = (task[i], int(attempt[i] or 0), subject[i])
                bulkhead[key] = bulkhead.get(key, 0.0) + float(value[i] or 0.0)
        elif k == "submit":
            if task[i] is not None and not str(task[i]).endswith("~dup"):
                submits[batch[i] or "-"].append(t[i])
                seen.add(task[i])
        elif k == "move":
            if task[i] is not None and task[i] not in seen:
                seen.add(task[i])
                unsubmitted[batch[i] or "-"] += 1
            _move(open_attempts, attempts, t[i], task[i], batch[i], src[i], dst[i], attempt[i],
                  reason[i])
    for b, count in unsubmitted.items():
        submits[b].extend([0.0] * count)
    end_t = _end_time(tr, t)
    return RunData(
        path=Path(path), source=str(tr.header.get("source")), header=tr.header, report=tr.report,
        trace=tr, calls={name: _calls(rows) for name, rows in sorted(calls.items())}, db=db,
        submits={b: np.sort(np.asarray(v)) for b, v in submits.items()}, attempts=attempts,
        end_t=end_t, limits=meta.get("limits"), gateway=meta.get("gateway"),
        bulkhead_waits=bulkhead, unsubmitted=sum(unsubmitted.values()),
        business_asks={p: np.sort(np.asarray(v)) for p, v in biz_asks.items()},
        business_queries={p: np.asarray(v) for p, v in biz_queries.items()},
    )


def _calls(rows: list[tuple[float, float, str, Any, int]]) -> Calls:
    rows.sort(key=lambda r: r[0])
    start, end, outcome, task, attempt = zip(*rows, strict=True)
    return Calls(np.asarray(start, float), np.asarray(end, float), np.asarray(outcome, object),
                 np.asarray(task, object), np.asarray(attempt, int))


def _db_step(grants: dict[tuple[Any, Any, str], list[tuple[float, float]]], t: float, task: Any,
             batch: Any, attempt: Any, pool: str, query: float, kept: bool) -> DbStep:
    """Pair a query's end with its grant (the latest grant of that task, attempt and pool)."""
    pending = grants.get((task, attempt, pool))
    granted, waited = pending.pop() if pending else (t - query, 0.0)
    return DbStep(pool, task, batch, int(attempt or 0), granted - waited, waited, query, kept)


def _move(open_attempts: dict[str, Attempt], attempts: list[Attempt], t: float, task: Any,
          batch: Any, src: Any, dst: Any, attempt: Any, reason: Any = None) -> None:
    if task is None:
        return
    if dst == "RUNNING":
        run = Attempt(task, batch, int(attempt or 0), t)
        open_attempts[task] = run
        attempts.append(run)
    elif src == "RUNNING" and task in open_attempts:
        run = open_attempts.pop(task)
        run.end, run.status = t, str(dst)
        run.reason = None if reason is None else str(reason)


def _end_time(tr: Trace, t: np.ndarray) -> float:
    report = tr.report or {}
    if report.get("sim_time_s") is not None:
        return float(report["sim_time_s"])
    last = float(t.max()) if len(t) else 0.0
    return max(last, float(tr.times[-1]) if len(tr.times) else 0.0)
