"""A batch's task program (DB steps, calls, local work), read off the attempts that succeeded.

Each successful attempt is laid out on its own time line: its DB steps (from asking for the
connection to the end of the query), its runs of calls to one downstream (from the first
request, less any bulkhead wait before it, to the end of the last; retries and their backoff
belong to the run), and the gaps around them. The most common order of steps is the
program; in the attempts that follow it, a gap position whose median is above the timing
noise (2 ms of real time) is a `work` step, fitted like any duration. Gaps just before calls
paced by a client token bucket are that bucket's waits, which no event records, so they are
never taken for work. A run's count of successful calls is its step's `count`: one number,
`integers` when every count in a range is about equally common, else the counts as an
`empirical` list. A DB step holds its connection for the whole task when the task kept it.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.fit.data import OK, Attempt, DbStep, RunData
from lab.fit.estimate import Estimate, bootstrap
from lab.fit.service import DurationFit, fit_durations

#: Real seconds below which a gap is the harness's own time, not work.
NOISE_REAL_S = 0.002


@dataclass
class Segment:
    start: float
    end: float
    kind: str  # db or call
    name: str  # pool or downstream
    count: int = 0  # successful calls of a call run
    query: float = 0.0
    kept: bool = False


@dataclass
class StepFit:
    kind: str  # work, db or call
    name: str = ""
    duration: DurationFit | None = None  # work time or query time
    counts: list[int] = field(default_factory=list)
    kept_share: float = 0.0

    def count_mean(self) -> Estimate:
        """Calls per task: the mean with its bootstrap interval."""
        counts = np.asarray(self.counts, float)
        if not len(counts):
            return Estimate(None, note="no task made this call")
        lo, hi = bootstrap(counts, np.mean, f"count:{self.name}")
        return Estimate(float(counts.mean()), lo, hi, f"mean of {len(counts)} tasks, bootstrap")

    def spec(self) -> dict[str, Any]:
        dist = self.duration.spec() if self.duration is not None else 0.0
        if self.kind == "work":
            return {"work": dist}
        if self.kind == "db":
            hold = "whole_task" if self.kept_share > 0.5 else "query_only"
            return {"db": {"pool": self.name, "query": dist, "hold": hold}}
        return {"call": {"downstream": self.name, "count": count_spec(self.counts)}}

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.kind}
        if self.name:
            out["name"] = self.name
        if self.duration is not None:
            out["duration"] = self.duration.as_json()
        if self.kind == "call":
            out["count"] = count_spec(self.counts)
            out["count_mean"] = self.count_mean().as_json()
        if self.kind == "db":
            out["kept_share"] = round(self.kept_share, 4)
        return out


@dataclass
class ProgramFit:
    batch: str
    attempts: int  # successful attempts seen
    used: int  # of those, the ones that follow the program
    steps: list[StepFit]

    def spec(self) -> list[dict[str, Any]]:
        return [s.spec() for s in self.steps]

    def as_json(self) -> dict[str, Any]:
        return {"successful_attempts": self.attempts, "following_the_program": self.used,
                "steps": [s.as_json() for s in self.steps]}


def fit_programs(run: RunData, paced: set[str]) -> dict[str, ProgramFit]:
    """One program per batch; `paced` are downstreams with a client token bucket."""
    calls = _calls_by_attempt(run)
    dbs: dict[tuple[str, int], list[DbStep]] = defaultdict(list)
    for step in run.db:
        dbs[(step.task, step.attempt)].append(step)
    by_batch: dict[str, list[Attempt]] = defaultdict(list)
    for a in run.attempts:
        if a.status == "SUCCESS" and a.end is not None:
            by_batch[a.batch or "-"].append(a)
    noise = NOISE_REAL_S / run.time_scale
    out = {}
    for batch, attempts in sorted(by_batch.items()):
        laid = [(a, _segments(a, calls, dbs, run.bulkhead_waits)) for a in attempts]
        out[batch] = _program(batch, laid, noise, paced)
    return out


def _calls_by_attempt(run: RunData) -> dict[tuple[str, int], list[tuple[float, float, str, bool]]]:
    out: dict[tuple[str, int], list[tuple[float, float, str, bool]]] = defaultdict(list)
    for name, c in run.calls.items():
        for s, e, o, task, att in zip(c.start.tolist(), c.end.tolist(), c.outcome.tolist(),
                                      c.task.tolist(), c.attempt.tolist(), strict=True):
            if task is not None:
                out[(task, att)].append((s, e, name, o == OK))
    return out


def _segments(a: Attempt, calls: dict[tuple[str, int], list[tuple[float, float, str, bool]]],
              dbs: dict[tuple[str, int], list[DbStep]],
              bulkhead: dict[tuple[str, int, str], float]) -> list[Segment]:
    segs = [Segment(d.asked, d.asked + d.waited + d.query, "db", d.pool, query=d.query,
                    kept=d.kept) for d in dbs.get((a.task, a.attempt), [])]
    runs: list[Segment] = []
    for s, e, name, ok in sorted(calls.get((a.task, a.attempt), [])):
        if runs and runs[-1].name == name:
            runs[-1].end = max(runs[-1].end, e)
            runs[-1].count += ok
        else:
            runs.append(Segment(s, e, "call", name, int(ok)))
    for run in runs:
        run.start -= bulkhead.get((a.task, a.attempt, run.name), 0.0)
    return sorted(segs + runs, key=lambda x: x.start)


def _program(batch: str, laid: list[tuple[Attempt, list[Segment]]], noise: float,
             paced: set[str]) -> ProgramFit:
    shapes = Counter(tuple((s.kind, s.name) for s in segs) for _, segs in laid)
    shape, _ = shapes.most_common(1)[0]
    used = [(a, segs) for a, segs in laid if tuple((s.kind, s.name) for s in segs) == shape]
    gaps = np.array([_gaps(a, segs) for a, segs in used])
    steps: list[StepFit] = []
    for p in range(len(shape) + 1):
        before_paced = p < len(shape) and shape[p][0] == "call" and shape[p][1] in paced
        if float(np.median(gaps[:, p])) > noise and not (before_paced and p > 0):
            steps.append(StepFit("work", duration=fit_durations(gaps[:, p], f"{batch}:work{p}")))
        if p == len(shape):
            break
        kind, name = shape[p]
        segs = [s[p] for _, s in used]
        if kind == "db":
            steps.append(StepFit("db", name, fit_durations(np.array([s.query for s in segs]),
                                                           f"{batch}:db{p}"),
                                 kept_share=float(np.mean([s.kept for s in segs]))))
        else:
            steps.append(StepFit("call", name, counts=[s.count for s in segs]))
    return ProgramFit(batch, len(laid), len(used), steps)


def _gaps(a: Attempt, segs: list[Segment]) -> list[float]:
    assert a.end is not None
    if not segs:
        return [a.end - a.began]
    out = [segs[0].start - a.began]
    out += [nxt.start - prev.end for prev, nxt in itertools.pairwise(segs)]
    return [*out, a.end - max(s.end for s in segs)]


def count_spec(counts: list[int]) -> Any:
    """A call count: a constant, integers low..high when about uniform, else empirical."""
    if not counts:
        return 1
    arr = np.asarray(counts)
    low, high = int(arr.min()), int(arr.max())
    if low == high:
        return low
    share = np.bincount(arr - low, minlength=high - low + 1) / len(arr)
    if np.max(np.abs(share - 1 / len(share))) <= max(0.05, 3 / np.sqrt(len(arr))):
        return {"dist": "integers", "low": low, "high": high}
    reps = np.maximum(0, np.round(share * 20)).astype(int)
    return {"dist": "empirical", "values": [low + i for i, r in enumerate(reps) for _ in range(r)]}
