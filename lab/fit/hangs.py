"""Hangs: attempts that outlived their timeout, deaf to cancellation (a program's `hang` step).

A hung attempt is one the watchdog timed out (its MOVE out of RUNNING says `timeout`, and it
ran at least the task timeout) whose worker stayed busy afterwards. What shows the worker
stayed busy depends on the executor, and says which one the run used:

* thread: the `stuck` series (workers busy with an attempt already timed out) rises; it
  falls again when the stuck thread's code returns. A timed-out attempt that returned at
  once (a slow call the client gave up on) never raises it and is no hang;
* process: the task's process is killed at the timeout (the report's `workers_killed`),
  so no stuck worker is seen.

Probability: hung attempts k of the batch's ended attempts n, a binomial proportion with
its Wilson 95 % interval (a hang is a per-attempt coin, as the `hang` step draws it).

Duration, from the hang's start (the end of the last call or DB step of the hung attempt,
else its claim) to its return. Under threads every return is a fall of the `stuck` series,
known to within one sample interval (its midpoint is taken): the hangs begun by a sample
(their timeouts, plus the delay before a thread counts as stuck: none in the simulator, the
load test's quarter second of real time, the runtime's default 1 s; plus two samples, so a
start is never counted before the series shows it) less the stuck count
at it are the returns by then, so a return is not lost when another hang begins in the
same interval. Which stuck thread returned is
not recorded, so returns are paired with hangs first in, first out (each return with the
earliest hang still stuck that began before it). Any pairing gives the same total, so the
mean duration is exact (up to the sampling), with a bootstrap interval over the hangs; the
FIFO pairing is the one with the least spread (rearrangement inequality), so the fitted cv
is a lower bound when hangs overlap. Hangs still stuck at the end of the run are censored
at it. Under processes no hang is seen to end: the duration is not identifiable, only
bounded below by the time from the hang's start to the kill; any duration above it
simulates alike (the kill ends the attempt), so twice that bound is written.

The step goes after as many call runs and DB steps of the batch's program as the hung
attempts completed (their median). What the trace does not record is left to the limits:
how many stuck threads the runner replaces (`stuck_threads_max`) and a kind's executor are
not in a load test's header, so the report says which executor the run shows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.fit.data import Attempt, DbStep, RunData
from lab.fit.estimate import Estimate, bootstrap, not_identifiable, wilson
from lab.fit.programs import _calls_by_attempt, _segments
from lab.fit.service import DurationFit, fit_durations
from lab.loadtest.runner import STUCK_AFTER_REAL_S

#: The runtime's default `stuck_after_s` (a worker's trace does not record it).
RUNTIME_STUCK_AFTER_S = 1.0

#: Share of the task timeout a timed-out attempt must have run to count as timed out by the
#: watchdog (a call's own `timeout` error ends an attempt sooner).
RAN_SHARE = 0.9


@dataclass
class HangFit:
    batch: str
    attempts: int  # ended attempts of the batch
    hung: int
    probability: Estimate
    executor: str  # thread or process: what the run shows
    after: int  # call runs and DB steps done before the hang (median over the hung attempts)
    duration: DurationFit | None = None
    mean: Estimate = field(default_factory=lambda: not_identifiable("no hang seen to end"))
    censored: int = 0
    bound_s: float = 0.0  # the shortest the hangs lasted (hang start to timeout), median
    durations: list[float] = field(default_factory=list)

    def duration_spec(self) -> Any:
        if self.duration is not None:
            return self.duration.spec()
        if self.durations:  # too few to fit a family: their mean
            return float(f"{np.mean(self.durations):.3g}")
        return float(f"{max(2 * self.bound_s, 1e-3):.3g}")

    def step(self) -> dict[str, Any]:
        return {"hang": {"probability": float(f"{self.probability.value or 0.0:.3g}"),
                         "duration": self.duration_spec()}}

    def as_json(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "hung": self.hung, "executor": self.executor,
                "probability": self.probability.as_json(), "after_steps": self.after,
                "duration_mean_s": self.mean.as_json(), "censored": self.censored,
                "bound_s": round(self.bound_s, 4), "duration": self.duration_spec(),
                **({"fit": self.duration.as_json()} if self.duration is not None else {})}


def fit_hangs(run: RunData) -> dict[str, HangFit]:
    """One HangFit per batch with hung attempts (empty when the run shows none)."""
    timed_out = [a for a in run.attempts if _timed_out(a, _timeout(run, a.batch))]
    if not timed_out:
        return {}
    stuck = _stuck(run)
    killed = int((run.report or {}).get("workers_killed") or 0)
    if stuck is not None and float(np.max(stuck[1])) > 0:
        executor = "thread"
    elif killed:
        executor = "process"
    else:
        return {}  # timed out, but every worker was free at once: no hang
    timed_out.sort(key=lambda a: a.end or 0.0)
    calls = _calls_by_attempt(run)
    dbs: dict[tuple[str, int], list[DbStep]] = defaultdict(list)
    for d in run.db:
        dbs[(d.task, d.attempt)].append(d)
    durations: list[float | None]
    if executor == "thread" and stuck is not None:
        lag = _stuck_after(run) + 2 * float(run.header.get("sample_interval_s") or 1.0)
        seen_at = [(a.end or 0.0) + lag for a in timed_out]
        returns, left = _returns(seen_at, *stuck)
        budget = min(len(timed_out), len(returns) + left)
    else:
        returns, budget = [], min(len(timed_out), killed)
    hung = timed_out[:budget]
    starts, done = [], []
    for a in hung:
        segs = _segments(a, calls, dbs, run.bulkhead_waits)
        starts.append(max([a.began] + [s.end for s in segs]))
        done.append(len(segs))
    durations = _pair(starts, returns) if executor == "thread" else [None] * len(hung)
    ended = defaultdict(int)
    for a in run.attempts:
        if a.end is not None:
            ended[a.batch or "-"] += 1
    out = {}
    for batch in sorted({a.batch or "-" for a in hung}):
        idx = [i for i, a in enumerate(hung) if (a.batch or "-") == batch]
        k, n = len(idx), ended[batch]
        fit = HangFit(batch, n, k, Estimate(k / n, *wilson(k, n), f"{k} of {n} attempts, Wilson"),
                      executor, int(np.median([done[i] for i in idx])),
                      bound_s=float(np.median([(hung[i].end or 0.0) - starts[i] for i in idx])))
        if executor == "thread":
            seen = np.array([d for i in idx if (d := durations[i]) is not None])
            fit.censored = k - len(seen)
            fit.durations = seen.tolist()
            fit.duration = fit_durations(seen, f"{batch}:hang", fit.censored)
            if len(seen):
                lo, hi = bootstrap(seen, np.mean, f"{batch}:hang_mean")
                fit.mean = Estimate(float(seen.mean()), lo, hi,
                                    f"{len(seen)} returns of stuck threads paired first in, "
                                    "first out, bootstrap" + (f"; {fit.censored} still stuck "
                                                              "at the end: a lower bound"
                                                              if fit.censored else ""))
            else:
                fit.mean = not_identifiable("no stuck thread returned before the run ended "
                                            f"(at least {run.end_t - min(starts):.3g} s)")
        else:
            fit.mean = not_identifiable(
                "the process executor kills a hung attempt's process at the timeout, so no "
                f"hang is seen to end; they lasted over {fit.bound_s:.3g} s (median), and any "
                "longer simulates alike")
        out[batch] = fit
    return out


def with_hang(program: list[dict[str, Any]], fit: HangFit) -> list[dict[str, Any]]:
    """`program` (a batch's fitted steps) with the hang step after `fit.after` calls/DB steps."""
    done = 0
    for i, step in enumerate(program):
        if done == fit.after:
            return [*program[:i], fit.step(), *program[i:]]
        done += "work" not in step
    return [*program, fit.step()]


def _timeout(run: RunData, batch: str | None) -> float | None:
    limits = run.limits or {}
    batches = limits.get("batches") or {}
    entry = (batches.get(batch) if isinstance(batches, dict) else
             next((b for b in batches if isinstance(b, dict) and b.get("id") == batch), None))
    value = (entry or {}).get("timeout_s") or limits.get("task_timeout_s")
    return float(value) if isinstance(value, int | float) else None


def _timed_out(a: Attempt, timeout: float | None) -> bool:
    if a.end is None or not (a.status == "TIMEOUT" or "'timeout'" in (a.reason or "")):
        return False
    return timeout is None or a.end - a.start >= RAN_SHARE * timeout


def _stuck(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """(sample times, stuck workers) of the `stuck` series, when the trace has it."""
    try:
        t, v = run.trace.series("stuck")
    except KeyError:
        return None
    if not len(v):
        return None
    return np.asarray(t, float), np.nan_to_num(np.asarray(v, float))


def _stuck_after(run: RunData) -> float:
    """How long after its stop a thread first counts as stuck, in the trace's seconds."""
    if run.source == "lab":
        return 0.0
    if run.source == "loadtest":
        return STUCK_AFTER_REAL_S / run.time_scale
    return RUNTIME_STUCK_AFTER_S


def _returns(seen_at: list[float], t: np.ndarray, v: np.ndarray) -> tuple[list[float], int]:
    """When stuck threads returned, and how many were still stuck at the end. Starts are
    known (`seen_at`: by when each timed-out attempt surely counts as stuck), so the
    returns by each sample are the starts by then less the stuck count: R = S - v, kept
    non-decreasing. Counting a start late only delays a return seen in the meantime (by
    the lag at most); counting it early would invent one. A return is placed at the middle
    of its sample interval."""
    seen = np.sort(np.asarray(seen_at, float))
    returned = 0
    out: list[float] = []
    for i in range(len(t)):
        now = int(np.searchsorted(seen, t[i], side="right")) - round(float(v[i]))
        if now > returned:
            mid = float(t[i]) - (float(t[i] - t[i - 1]) / 2 if i > 0 else 0.0)
            out += [mid] * (now - returned)
            returned = now
    return out, round(float(v[-1]))


def _pair(starts: list[float], returns: list[float]) -> list[float | None]:
    """First in, first out: each return to the earliest unpaired hang begun before it."""
    order = sorted(range(len(starts)), key=starts.__getitem__)
    out: list[float | None] = [None] * len(starts)
    waiting: list[int] = []
    j = 0
    for r in sorted(returns):
        while j < len(order) and starts[order[j]] <= r:
            waiting.append(order[j])
            j += 1
        if waiting:
            i = waiting.pop(0)
            out[i] = r - starts[i]
    return [None if d is None or not math.isfinite(d) else d for d in out]
