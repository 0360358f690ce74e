"""What the load test's own machinery added to a run, so the report can say when the harness,
not the system under test, is the bottleneck.

Two measurements, both in real seconds as they happen and in scenario seconds in the report:

* per call, the overhead: the latency the client measured less the time the emulated provider
  says it spent (its `X-Served-S` header: outage, bucket, queue and service). What is left is
  the client's own Python, the interpreter lock shared with every worker thread, the loopback
  network and the server's event loop. The simulator has none of it, so where it is a visible
  share of a call, latencies, timeouts and retry timing are partly the harness's;
* per timer (work steps, DB holds, arrival pacing, and the runtime's own waits between a
  call's attempts: backoff and pacing, through its `waits` seam, `TimedWaits`; for the
  coroutines of `async` kinds, their work, holds and hangs, `timed_sleep`), how late it
  woke: a timer that fires late stretches every step it times.

`warnings` turns them into lines of the report when the median overhead passes
`OVERHEAD_SHARE` of the median call, its p99 `BURST_SHARE` of it, the median lateness
`LATE_SHARE` of the median timer, or its p99 `BURST_SHARE` of it. These replace fixed
limits on calls in flight and requests per second: the same 800 calls in flight cost the
harness little when they wait on a slow provider and a lot when they arrive in one burst.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from taskfuse.runtime.calls import RealWaits

if TYPE_CHECKING:
    from taskfuse.runtime.context import TaskContext

#: Past these shares, the report warns that the harness shows in the numbers.
OVERHEAD_SHARE = 0.05
LATE_SHARE = 0.05
#: ... or when its p99 passes this share of the median call (bursts smeared).
BURST_SHARE = 0.25
#: At most this many samples are kept per measure (evenly thinned beyond).
MAX_SAMPLES = 200_000


class TimedWaits(RealWaits):
    """The runtime's waits between a call's attempts (its retry backoff, its pacing), each
    timed like the harness's own timers: a process short of CPU wakes them late too."""

    def __init__(self, stats: HarnessStats) -> None:
        self.stats = stats

    def pause(self, ctx: TaskContext, seconds: float) -> bool:
        return self.stats.timed_wait(ctx.wait_stop, seconds)


class HarnessStats:
    """Thread-safe collector of call overheads (per downstream) and timer lateness."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.overhead: dict[str, list[float]] = {}
        self.latency: dict[str, list[float]] = {}
        self.asked: list[float] = []
        self.late: list[float] = []

    def call(self, name: str, measured: float, served: float | None) -> None:
        """One call of `measured` real seconds, `served` of them at the provider."""
        if served is None:
            return
        with self.lock:
            if len(self.latency.setdefault(name, [])) < MAX_SAMPLES:
                self.latency[name].append(measured)
                self.overhead.setdefault(name, []).append(max(0.0, measured - served))

    def timed_wait(self, wait: Callable[[float], bool], seconds: float) -> bool:
        """`wait(seconds)` (True when told to stop), timed as a timer unless it was cut short."""
        began = time.monotonic()
        if wait(seconds):
            return True
        self.timer(seconds, time.monotonic() - began)
        return False

    async def timed_sleep(self, seconds: float) -> None:
        """`asyncio.sleep(seconds)` timed as a timer (a coroutine's wait: a loop held by
        other coroutines, or a process short of CPU, wakes it late). A cancel (the task's
        timeout or stop) cuts it short, untimed, as a stop does a thread's wait."""
        began = time.monotonic()
        await asyncio.sleep(seconds)
        self.timer(seconds, time.monotonic() - began)

    def timer(self, asked: float, slept: float) -> None:
        """A timer asked for `asked` real seconds and woke after `slept`."""
        with self.lock:
            if len(self.asked) < MAX_SAMPLES:
                self.asked.append(asked)
                self.late.append(max(0.0, slept - asked))

    def summary(self, scale: float) -> dict[str, Any]:
        """Percentiles in scenario seconds (real / scale), and shares of the median."""
        with self.lock:
            calls = {name: _calls(self.overhead[name], self.latency[name], scale)
                     for name in sorted(self.overhead)}
            timers = _timers(self.asked, self.late, scale)
        return {"calls": calls, "timers": timers}


def warnings(summary: dict[str, Any]) -> list[str]:
    """Report lines where the harness's own time is a visible share of what it measured."""
    notes = []
    for name, c in summary["calls"].items():
        share = c["overhead_share_of_median"]
        if share is not None and c["overhead_p50_s"] and (
                c["overhead_p99_s"] / c["overhead_p50_s"] * share > BURST_SHARE):
            notes.append(f"{name}: the slowest calls wait {c['overhead_p99_s'] * 1000:.1f} ms "
                         "(p99, scenario time) for the harness, "
                         f"{c['overhead_p99_s'] / c['overhead_p50_s'] * share:.0%} of a median "
                         "call: bursts of requests are smeared (a larger --time-scale helps)")
        if share is not None and share > OVERHEAD_SHARE:
            notes.append(f"{name}: the harness adds {c['overhead_p50_s'] * 1000:.1f} ms "
                         f"(p99 {c['overhead_p99_s'] * 1000:.1f} ms, scenario time) to a call, "
                         f"{c['overhead_share_of_median']:.0%} of its median: latencies and "
                         "timeouts are partly the harness's (a larger --time-scale helps)")
    t = summary["timers"]
    tail = t.get("late_p99_share_of_median")
    if tail is not None and tail > BURST_SHARE:
        notes.append(f"the slowest timers wake {t['late_p99_s'] * 1000:.1f} ms late (p99, "
                     f"scenario time), {tail:.0%} of the median sleep: some work, backoff and "
                     "holds are stretched, as in a process out of CPU (a larger --time-scale "
                     "helps)")
    if t["late_share_of_median"] is not None and t["late_share_of_median"] > LATE_SHARE:
        notes.append(f"timers wake {t['late_p50_s'] * 1000:.1f} ms late (p99 "
                     f"{t['late_p99_s'] * 1000:.1f} ms, scenario time), "
                     f"{t['late_share_of_median']:.0%} of the median sleep: work, backoff and "
                     "holds are stretched (a larger --time-scale helps)")
    return notes


def _calls(overhead: list[float], latency: list[float], scale: float) -> dict[str, Any]:
    p50, p99, share = _spread(overhead, latency, scale)
    mean, sd = _moments(overhead, scale)
    return {"calls": len(overhead), "overhead_p50_s": p50, "overhead_p99_s": p99,
            "overhead_share_of_median": share, "overhead_mean_s": mean, "overhead_sd_s": sd}


def _timers(asked: list[float], late: list[float], scale: float) -> dict[str, Any]:
    p50, p99, share = _spread(late, asked, scale)
    tail = (round(p99 * scale / float(np.median(asked)), 4)
            if p99 is not None and asked and np.median(asked) else None)
    mean, sd = _moments(late, scale)
    return {"timers": len(late), "late_p50_s": p50, "late_p99_s": p99,
            "late_share_of_median": share, "late_p99_share_of_median": tail,
            "late_mean_s": mean, "late_sd_s": sd}


def _moments(extra: list[float], scale: float) -> tuple[float | None, float | None]:
    """Mean and standard deviation (scenario seconds): what `lab fit` takes out of the
    durations it fits (lab.fit.overhead)."""
    if not extra:
        return None, None
    e = np.asarray(extra)
    return _s(float(np.mean(e)), scale), _s(float(np.std(e)), scale)


def _spread(extra: list[float], base: list[float], scale: float
            ) -> tuple[float | None, float | None, float | None]:
    """Median and p99 of `extra` (in scenario seconds), and its median over `base`'s."""
    e, b = np.asarray(extra), np.asarray(base)
    median = float(np.median(b)) if len(b) else 0.0
    p50 = float(np.median(e)) if len(e) else None
    p99 = float(np.percentile(e, 99)) if len(e) else None
    share = round(p50 / median, 4) if p50 is not None and median else None
    return _s(p50, scale), _s(p99, scale), share


def _s(real: float | None, scale: float) -> float | None:
    return None if real is None else round(real / scale, 6)
