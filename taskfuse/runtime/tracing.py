"""A real run recorded in the lab's trace format, so the monitor can follow or replay it.

`RuntimeTrace` is two things: an event sink on the runner's Scheduler (every move, breaker
change, wait and downstream call), and a sampler thread that appends one timeline row every
`interval_s` — the lab's series where they apply to a real run: queue depth, running,
outcomes so far, throughput, success rate, alerts firing, the event loop's lag (`loop_lag`,
only with async kinds: the largest lag since the previous sample, in seconds, as in a
simulation's trace), and per downstream: in flight, limit, calls per second, 429s, errors,
breaker state, seconds to half-open, tokens.

Times in the trace are seconds since the run started, like a simulation's; the wall-clock
start is in the header's meta (`t0_epoch`). Queue depth and outcomes come from the store, so
with a durable store they describe the fleet, not only this process. `running` and its limit
(`running_limit`) are this process's own: the tasks its threads run against its thread count
(the store's RUNNING count of a fleet against one process's threads would read "12/4"). The
header names the run by its app and worker (`scenario` is the app's name, `meta.worker_id`
this process) and carries no seed: a real run has none. Its meta also holds the limits the
worker runs with (`limits`: the App's limits as a limits file holds them, every value, with
this process's thread count) and the limits file they were read from (`limits_file`), so
`lab fit` of a worker's trace writes back the file it ran with. Batches are not series here (they
appear as tasks are submitted, after the header is written); every SUBMIT and MOVE event
carries its batch_id, and the monitor counts batches from those.

Every task in the trace starts with a SUBMIT, also one this process did not submit (the
usual case: `taskfuse submit` runs in another process). Without it a reader counting by
events saw a claim of a task it never saw enter, and PENDING went below zero. Two places
write such a SUBMIT, both once per task: the event sink, before the first event of a task it
has not seen (a claim right after the submit, before any sample), and the sampler, for
PENDING tasks in the store whenever the store's total moved (the queue of tasks not yet
claimed). Its time is the task's `created_at` when that keeps the events in order, else the
latest time written (the queued time a reader shows is then short by at most one interval).
Tasks that ended before this process started are not in the trace. The source's alert rules
(DESIGN.md, "Observability") are evaluated at every sample on the store's counts and the
durations of the tasks this process finished; their changes are ALERT events in the trace.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import Guard
from taskfuse.core.metrics import AlertEvaluator, AlertRule, MetricsAggregator
from taskfuse.core.states import TERMINAL, TaskStatus
from taskfuse.limits.build import alert_rules
from taskfuse.trace import BREAKER_CODES, TraceWriter, compact

#: The WAIT reason of an event loop lag (taskfuse.runtime.aio).
LOOP_LAG = "loop_lag"

if TYPE_CHECKING:
    from taskfuse.runtime.threads import Runner

log = logging.getLogger("taskfuse.runtime.trace")

_DONE = [s for s in TaskStatus if s in TERMINAL]
_DS_SERIES = ("in_flight", "limit", "rps", "r429", "errors", "breaker", "reopen_in", "tokens")
_HTTP_429 = "http_429"
_STATE_KINDS = (EventKind.SUBMIT, EventKind.MOVE)


def series_names(downstreams: list[str], loop: bool = False) -> list[str]:
    """The timeline's columns, in order: the standard series that apply to a real run
    (`loop_lag` when a kind runs on the event loop)."""
    names = ["queue_depth", "running", "running_limit", "submitted"]
    names += [f"done.{s.value}" for s in _DONE]
    names += ["throughput", "success_rate", "alerts.firing"]
    names += ["loop_lag"] if loop else []
    names += [f"ds.{d}.{s}" for d in downstreams for s in _DS_SERIES]
    return names


class RuntimeTrace:
    """Writes a runner's events and a sampled timeline to a trace file (see module doc)."""

    def __init__(
        self,
        runner: Runner,
        path: str | os.PathLike[str],
        interval_s: float = 1.0,
        rules: list[AlertRule] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"trace interval must be > 0 seconds, got {interval_s!r}")
        self.runner = runner
        self.interval_s = interval_s
        self.t0 = runner.clock()
        self._downstreams = sorted(runner.scheduler.guards)
        self._loop = runner.aio is not None
        self._lag_peak = 0.0  # the largest loop_lag WAIT since the last sample
        header = {
            "source": "runtime",
            "scenario": runner.app.name,
            "seed": None,
            "series": series_names(self._downstreams, self._loop),
            "sample_interval_s": interval_s,
            "meta": {
                "downstreams": self._downstreams,
                "pools": [],
                "batches": [],
                "workers": runner.workers,
                "slo": {},
                "worker_id": runner.worker_id,
                "t0_epoch": self.t0,
                "limits": limits_record(runner),
                "limits_file": runner.app.limits_file,
            },
        }
        self._lock = threading.Lock()  # the writer is not thread-safe; events come from many
        self._writer = TraceWriter(path, header, flush_every=2000)
        self._calls = dict.fromkeys(self._downstreams, 0)
        self._r429 = dict.fromkeys(self._downstreams, 0)
        self._errors = dict.fromkeys(self._downstreams, 0)
        self._last_calls = dict(self._calls)
        self._last_done = 0
        self._last_t = 0.0
        self._seen: set[str] = set()  # tasks in flight with a SUBMIT in the trace (self._lock)
        self._ended: set[str] = set()  # tasks that ended since the last sample (self._lock)
        self._latest_t = 0.0  # the latest event time written (under self._lock)
        self._store_total = 0  # the store's task count when its PENDING tasks were last read
        self._store_ended = 0  # and its ended tasks then (fewer now: an operator's retry)
        self._stop = threading.Event()
        self.metrics = MetricsAggregator()
        self.alerts = AlertEvaluator(rules if rules is not None else _rules(runner),
                                     self.metrics, emit=runner.scheduler.emit,
                                     p99_baseline_s=runner.app.limits.alerts.p99_baseline_s)
        runner.scheduler.emit.add(self)
        runner.scheduler.emit.add(self.metrics)

    def __call__(self, event: Event) -> None:
        """The event sink: times made relative to the start, downstream calls counted."""
        if event.kind == EventKind.CALL and event.subject in self._calls:
            self._calls[event.subject] += 1
            if event.reason == _HTTP_429:
                self._r429[event.subject] += 1
            elif event.reason != "ok":
                self._errors[event.subject] += 1
        elif event.reason == LOOP_LAG and event.kind == EventKind.WAIT:
            self._lag_peak = max(self._lag_peak, event.value or 0.0)
        event = event._replace(t=event.t - self.t0)
        with self._lock:
            if not self._writer.closed:
                if event.kind in _STATE_KINDS:
                    self._enter(event)
                self._write(event)

    def _enter(self, event: Event) -> None:
        """Keep `_seen` for a SUBMIT or MOVE (self._lock held): write the SUBMIT a task's
        first move implies, and forget a task once it ended (no move follows a terminal
        state, so a long run's set holds only the tasks in flight)."""
        task_id = event.task_id
        if event.kind == EventKind.SUBMIT:
            self._seen.add(task_id)
        elif task_id not in self._seen and event.src == TaskStatus.PENDING:
            self._write(_submit(event.t, task_id, event.batch_id, event.trace_id))
        if event.dst in TERMINAL:
            self._seen.discard(task_id)
            self._ended.add(task_id)
        elif event.kind == EventKind.MOVE:
            self._seen.add(task_id)

    def _write(self, event: Event) -> None:
        """Write one event (self._lock held), keeping the latest time written."""
        self._latest_t = max(self._latest_t, event.t)
        self._writer.event(compact(event))

    def _discover(self, counts: dict[TaskStatus, int]) -> None:
        """SUBMITs for PENDING tasks of the store not yet in the trace (see module doc).

        Read only when the store's task count moved or its ended tasks became fewer (an
        operator's retry reopens ended tasks without adding any), so an idle or a draining
        run asks nothing.
        """
        with self._lock:
            self._ended.clear()  # a task read PENDING below that ends meanwhile lands here
        total = sum(counts.values())
        ended = sum(counts.get(s, 0) for s in _DONE)
        reopened = ended < self._store_ended
        self._store_ended = ended
        if total == self._store_total and not reopened:
            return
        self._store_total = total
        pending = self.runner.store.waiting_since_before(float("inf"))  # outside every lock
        with self._lock:
            for task in pending:
                known = task.task_id in self._seen or task.task_id in self._ended
                if not known and not self._writer.closed:
                    self._seen.add(task.task_id)
                    t = max(task.created_at - self.t0, self._latest_t)
                    self._write(_submit(t, task.task_id, task.batch_id, task.trace_id))

    def run(self) -> None:
        """The sampler thread's loop: one row now, then one every interval, until closed."""
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("trace sample failed")
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        runner = self.runner
        counts = runner.store.counts()  # a query on a database: outside every lock
        self._discover(counts)
        busy = len(runner.running_tasks())
        stuck = sum(1 for s in runner.stuck_threads() if not s["coroutine"])  # threads
        lag = self._interval_lag()
        with runner.lock:
            now = runner.clock()
            self.metrics.stuck_share = stuck / runner.workers
            self.metrics.loop_lag = lag
            firing = self._evaluate(counts, now)
            ds = [self._downstream_row(runner.scheduler.guards[d], now) for d in self._downstreams]
        t = now - self.t0
        row = [*self._row(counts, busy, t), firing] + ([lag] if self._loop else [])
        row += [v for cols in ds for v in cols]
        with self._lock:
            if not self._writer.closed:
                self._writer.sample(t, row)
                self._writer.flush()
        self._last_t = t

    def _interval_lag(self) -> float | None:
        """The largest event loop lag since the previous sample (None: no loop): the lag
        events of the interval (each at least LAG_REPORT_S) and the last ping's lag, so a
        blocked loop between two samples is seen even once it answers again."""
        if not self._loop:
            return None
        peak, self._lag_peak = self._lag_peak, 0.0
        return round(max(peak, self.runner.loop_lag()[0]), 6)

    def _evaluate(self, counts: dict[TaskStatus, int], now: float) -> int:
        """Alert rules on the store's counts (runner lock held); answers how many fire."""
        for status, n in counts.items():
            self.metrics.counts[status.value] = n
        self.alerts.evaluate(now)
        return len(self.alerts.firing)

    def _row(self, counts: dict[TaskStatus, int], busy: int, t: float) -> list[Any]:
        done = sum(counts.get(s, 0) for s in _DONE)
        dt = t - self._last_t
        throughput = (done - self._last_done) / dt if dt > 0 and self._last_t else None
        self._last_done = done
        ok, failed = counts.get(TaskStatus.SUCCESS, 0), counts.get(TaskStatus.FAILED, 0)
        return [
            counts.get(TaskStatus.PENDING, 0),
            busy,
            self.runner.workers,
            sum(counts.values()),
            *(counts.get(s, 0) for s in _DONE),
            throughput,
            ok / (ok + failed) if ok + failed else None,
        ]

    def _downstream_row(self, guard: Guard, now: float) -> list[Any]:
        name = guard.name
        dt = max(now - self.t0 - self._last_t, 1e-9)
        rps = (self._calls[name] - self._last_calls[name]) / dt if self._last_t else None
        self._last_calls[name] = self._calls[name]
        breaker, bucket = guard.breaker, guard.bucket
        reopen = breaker.reopen_at() if breaker is not None else None
        return [
            guard.in_flight,
            guard.bulkhead.limit if guard.bulkhead is not None else None,
            rps,
            self._r429[name],
            self._errors[name],
            BREAKER_CODES[breaker.state(now).value] if breaker is not None else None,
            max(0.0, reopen - now) if reopen is not None else None,
            bucket.tokens(now) if bucket is not None else None,
        ]

    def close(self) -> None:
        """A last sample, then the footer with this process's report."""
        self._stop.set()
        try:
            self.sample()
        except Exception:
            log.exception("final trace sample failed")
        stats = self.runner.stats
        with self.runner.lock:
            counts = {s.value: n for s, n in self.runner.store.counts().items()}
        report = {
            "duration_s": self.runner.clock() - self.t0,
            "counts": counts,
            "claimed": stats.claimed,
            "completed": stats.completed,
            "discarded": stats.discarded,
            "expired": stats.expired,
            "released": stats.released,
            "alerts": self.alerts.history,
        }
        with self._lock:
            self._writer.close(report)



def _submit(t: float, task_id: str | None, batch_id: str | None, trace_id: str | None
            ) -> Event:
    """A SUBMIT as the scheduler emits one (the task entered PENDING)."""
    return Event(t, EventKind.SUBMIT, task_id, batch_id, trace_id, None, TaskStatus.PENDING,
                 None, 1, None)


def limits_record(runner: Runner) -> dict[str, Any]:
    """The limits this process runs with, in a limits file's keys (None values left out)."""
    doc = runner.app.limits.model_dump(mode="json", exclude_none=True)
    doc["workers"] = runner.workers  # `Runner(workers=N)` wins over the App's
    return doc


def _rules(runner: Runner) -> list[AlertRule]:
    """The source's four alerts with the app's thresholds (the one builder's alert_rules).

    "Running above its limit" compares with the limits' `alerts.running_limit`, else this
    process's worker count, which only means something when the store is this process's own.
    """
    alerts = runner.app.limits.alerts
    limit = alerts.running_limit if alerts.running_limit is not None else float(runner.workers)
    rules = alert_rules(alerts, limit)
    if not runner.is_local and alerts.running_limit is None:
        rules = [r for r in rules if r.metric != "running"]
    return rules
