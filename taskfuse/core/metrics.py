"""The four metrics of a batch system and the alert rules on them, computed from events.

Metrics (DESIGN.md, "Observability"):

* running — tasks RUNNING now (alert: above its limit for 5 minutes);
* queue depth — tasks PENDING now (alert: above 500 for 10 minutes);
* success rate — SUCCESS / (SUCCESS + FAILED) so far (alert: below 95 %);
* P99 duration per batch — started_at to finished_at of attempts that ended a task
  (alert: above 2 x its history).

The aggregator is an event sink, so the same numbers come out of a simulation, a real run, or
a replayed trace. Alert rules hold a condition "for N seconds" before firing, like
Prometheus' `for:`; they are evaluated at a `now` the driver passes in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from taskfuse.core.events import THREAD_WAIT, Event, EventKind
from taskfuse.core.states import TERMINAL, TaskStatus

NO_BATCH = "-"
_RUNNING = TaskStatus.RUNNING.value
_PENDING = TaskStatus.PENDING.value
_TERMINAL = frozenset(s.value for s in TERMINAL)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile q (0..100) of `values`; None when there are none.

    Nearest rank returns an observed value, so a recount from the store gives the very same
    number: p99 of 200 values is the 198th smallest.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    running: int
    queue_depth: int
    success_rate: float | None
    p99_by_batch: dict[str, float]


class MetricsAggregator:
    """Keeps the source's four metrics current from SUBMIT and MOVE events (an event sink).

    `stuck_share` is the driver's to set, as no event says it: worker threads busy with a
    task that is no longer RUNNING over all worker threads (None: not known). So is
    `loop_lag`: how late the event loop of the async executor runs its callbacks, in
    seconds (None: no async kind, no loop).
    """

    def __init__(self, recent_samples: int = 1000) -> None:
        self.stuck_share: float | None = None
        self.loop_lag: float | None = None
        self.counts: dict[str, int] = dict.fromkeys((s.value for s in TaskStatus), 0)
        self.durations: dict[str, list[float]] = {}
        self.recent: dict[str, deque[tuple[float, float]]] = {}
        self._recent_samples = recent_samples
        self._started: dict[str, float] = {}

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == EventKind.MOVE:
            counts = self.counts
            counts[event.src] -= 1  # type: ignore[index]
            counts[event.dst] += 1  # type: ignore[index]
            task_id = event.task_id
            if event.dst == _RUNNING:
                self._started[task_id] = event.t  # type: ignore[index]
            elif event.src == _RUNNING:
                started = self._started.pop(task_id, None)  # type: ignore[arg-type]
                if started is not None and event.dst in _TERMINAL:
                    self._add_duration(event.batch_id or NO_BATCH, event.t, event.t - started)
        elif kind == EventKind.SUBMIT:
            self.counts[_PENDING] += 1
        elif kind == EventKind.WAIT and event.reason == THREAD_WAIT:
            started = self._started.get(event.task_id)  # type: ignore[arg-type]
            if started is not None:  # its run begins when a thread takes it
                self._started[event.task_id] = started + (event.value or 0.0)  # type: ignore[index]

    def _add_duration(self, batch: str, t: float, duration: float) -> None:
        durations = self.durations.get(batch)
        if durations is None:
            durations = self.durations[batch] = []
            self.recent[batch] = deque(maxlen=self._recent_samples)
        durations.append(duration)
        self.recent[batch].append((t, duration))

    @property
    def running(self) -> int:
        return self.counts[_RUNNING]

    @property
    def queue_depth(self) -> int:
        return self.counts[_PENDING]

    @property
    def success_rate(self) -> float | None:
        ok = self.counts[TaskStatus.SUCCESS.value]
        failed = self.counts[TaskStatus.FAILED.value]
        return None if ok + failed == 0 else ok / (ok + failed)

    def p99(self, batch: str) -> float | None:
        return percentile(self.durations.get(batch, ()), 99)

    def snapshot(self) -> MetricsSnapshot:
        p99s = {b: percentile(d, 99) for b, d in self.durations.items() if d}
        return MetricsSnapshot(
            self.running, self.queue_depth, self.success_rate,
            {b: v for b, v in p99s.items() if v is not None},
        )


@dataclass(frozen=True, slots=True)
class AlertRule:
    """Fire when `metric op threshold` has held for `for_s` seconds.

    metric is one of running, queue_depth, success_rate, p99_ratio (recent P99 of a batch
    over its history); op is ">" or "<". `min_samples` keeps a rate-based rule quiet until
    that many tasks finished.
    """

    name: str
    metric: str
    op: str
    threshold: float
    for_s: float = 0.0
    min_samples: int = 0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"alert {self.name!r}: metric must be one of {sorted(METRICS)}, "
                             f"got {self.metric!r}")
        if self.op not in (">", "<"):
            raise ValueError(f"alert {self.name!r}: op must be '>' or '<', got {self.op!r}")
        if self.for_s < 0:
            raise ValueError(f"alert {self.name!r}: for_s must be >= 0, got {self.for_s!r}")


METRICS = frozenset({"running", "queue_depth", "success_rate", "p99_ratio", "stuck_share",
                     "loop_lag"})


def default_rules(
    running_limit: float,
    *,
    running_for_s: float = 300.0,
    queue_depth: float = 500.0,
    queue_for_s: float = 600.0,
    success_rate: float = 0.95,
    p99_ratio: float = 2.0,
    min_finished: int = 20,
    stuck_share: float = 0.25,
    stuck_for_s: float = 60.0,
    loop_lag_s: float = 0.1,
    loop_lag_for_s: float = 60.0,
) -> list[AlertRule]:
    """The source's four alerts, a fifth for threads stolen by hung tasks and a sixth for
    an event loop held by a coroutine that blocks it (a sync call, CPU); the defaults are
    the source's thresholds (stuck threads: a quarter of the pool for a minute; loop lag:
    over 100 ms for a minute, the lag at which the worker names the blocking task).

    The one definition of the rules: the lab, the runtime's trace and the load test get them
    through `taskfuse.limits.build.alert_rules`, and a test holds the shipped Prometheus
    rules file to the same shapes. The two rate-based rules stay quiet until `min_finished`
    tasks ended, so one early failure is not "success rate 0 %".
    """
    return [
        AlertRule("running_above_limit", "running", ">", running_limit, for_s=running_for_s),
        AlertRule("queue_depth_high", "queue_depth", ">", queue_depth, for_s=queue_for_s),
        AlertRule("success_rate_low", "success_rate", "<", success_rate,
                  min_samples=min_finished),
        AlertRule("p99_above_history", "p99_ratio", ">", p99_ratio, min_samples=min_finished),
        AlertRule("stuck_threads_high", "stuck_share", ">", stuck_share, for_s=stuck_for_s),
        AlertRule("loop_lag_high", "loop_lag", ">", loop_lag_s, for_s=loop_lag_for_s),
    ]


@dataclass(frozen=True, slots=True)
class AlertChange:
    rule: str
    at: float
    firing: bool
    value: float


class AlertEvaluator:
    """Evaluates alert rules at a given `now`, remembering since when each condition held.

    The P99 history of a batch is `p99_baseline_s[batch]` (or `["*"]`) when configured,
    else the P99 of its first `baseline_samples` durations; the recent P99 is over the last
    `window_s` seconds of durations.
    """

    def __init__(
        self,
        rules: Iterable[AlertRule],
        metrics: MetricsAggregator,
        emit: Callable[[Event], None] | None = None,
        p99_baseline_s: Mapping[str, float] | None = None,
        baseline_samples: int = 100,
        window_s: float = 300.0,
    ) -> None:
        self.rules = list(rules)
        self.metrics = metrics
        self.emit = emit
        self.baseline = dict(p99_baseline_s or {})
        self.baseline_samples = baseline_samples
        self.window_s = window_s
        self._since: dict[str, float] = {}
        self._p99_cache: tuple[float, float | None] = (-1e300, None)
        self.firing: dict[str, float] = {}
        self.history: list[list[float | str | None]] = []  # [rule, fired_at, resolved_at]

    def value(self, metric: str, now: float) -> float | None:
        m = self.metrics
        if metric == "running":
            return float(m.running)
        if metric == "queue_depth":
            return float(m.queue_depth)
        if metric == "success_rate":
            return m.success_rate
        if metric == "stuck_share":
            return m.stuck_share
        if metric == "loop_lag":
            return m.loop_lag
        return self._p99_ratio(now)

    def _finished(self) -> int:
        c = self.metrics.counts
        return c[TaskStatus.SUCCESS.value] + c[TaskStatus.FAILED.value]

    def _p99_ratio(self, now: float) -> float | None:
        """Recomputed at most every 30 s: a percentile over a 5-minute window moves slowly,
        and recomputing it at every sample was a tenth of a large simulation."""
        at, value = self._p99_cache
        if now - at < 30.0:
            return value
        value = self._compute_p99_ratio(now)
        self._p99_cache = (now, value)
        return value

    def _compute_p99_ratio(self, now: float) -> float | None:
        worst = None
        for batch, durations in self.metrics.durations.items():
            base = self.baseline.get(batch, self.baseline.get("*"))
            if base is None:
                if len(durations) < 2 * self.baseline_samples:
                    continue
                base = percentile(durations[: self.baseline_samples], 99)
            recent = [d for t, d in self.metrics.recent[batch] if t >= now - self.window_s]
            if len(recent) < 20 or not base:
                continue
            ratio = (percentile(recent, 99) or 0.0) / base
            worst = ratio if worst is None else max(worst, ratio)
        return worst

    def evaluate(self, now: float) -> list[AlertChange]:
        changes = []
        for rule in self.rules:
            value = self.value(rule.metric, now)
            enough = rule.min_samples == 0 or self._finished() >= rule.min_samples
            bad = (
                value is not None
                and enough
                and (value > rule.threshold if rule.op == ">" else value < rule.threshold)
            )
            if bad:
                since = self._since.setdefault(rule.name, now)
                if rule.name not in self.firing and now - since >= rule.for_s:
                    self.firing[rule.name] = now
                    self.history.append([rule.name, now, None])
                    changes.append(AlertChange(rule.name, now, True, value))  # type: ignore[arg-type]
            else:
                self._since.pop(rule.name, None)
                if rule.name in self.firing:
                    del self.firing[rule.name]
                    for entry in reversed(self.history):
                        if entry[0] == rule.name and entry[2] is None:
                            entry[2] = now
                            break
                    changes.append(AlertChange(rule.name, now, False, value or 0.0))
        if self.emit is not None:
            for c in changes:
                self.emit(Event(c.at, EventKind.ALERT, None, None, None, None,
                                "firing" if c.firing else "resolved", None, None, None,
                                c.rule, c.value))
        return changes
