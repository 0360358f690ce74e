"""Prometheus exposition of one worker process: the source's four metrics, and the fuses.

    metrics = WorkerMetrics(runner)            # before runner.start(): it is an event sink
    server = serve(metrics.registry, port=9464)
    ...
    server.close()

`taskfuse worker --metrics-port P` does exactly this. Everything lives on the exporter's own
`CollectorRegistry`, never the process-global one, so two runners in one process (tests, an
embedding application) never collide and nothing else leaks into the page.

Two kinds of numbers, because a fleet of worker processes shares one store:

* **From the store, at scrape time** (a custom collector calling `store.counts()`):
  `taskfuse_tasks{status}`, `taskfuse_queue_depth`, `taskfuse_tasks_running`,
  `taskfuse_success_ratio`. Every worker reports the same fleet-wide value, so with many
  processes on PostgreSQL they agree; aggregate them with `max`, never `sum`.
* **From this process's events** (counters and histograms, aggregate with `sum`): tasks
  ended here by status, durations per batch (`taskfuse_task_duration_seconds`, from which
  p99 is computed), retries by error kind, breaker-open deferrals, and per downstream:
  calls, errors by kind, HTTP 429s, permit waits, breaker transitions. Fuses are per
  process too, so their gauges (breaker state, bulkhead in use / limit / waiting, tokens)
  are read from this runner's guards at scrape time, as are its pool sections and the
  per-call retries its call clients decided.
* **The limits it runs with** (`taskfuse_limit{downstream,fuse}`, `taskfuse_pool_limit`,
  `taskfuse_task_limit`, `taskfuse_workers_limit`): the configured values of its limits
  file (or of the app's code), so a dashboard can show a measured value against the limit
  the lab sized, and an operator can check what a worker really loaded.

A duration is started_at to the move that ended the task, as the core's MetricsAggregator
measures it; a task whose start this process did not see (its attempt ran elsewhere and
this process's watchdog ended it) is counted but not timed.

Cardinality: the histogram is labelled by batch id (tasks without one: "-"). Give
long-lived jobs stable batch ids (e.g. one per job and day), not one per run of a loop.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from taskfuse.core.breaker import BreakerState
from taskfuse.core.events import Event, EventKind
from taskfuse.core.metrics import NO_BATCH
from taskfuse.core.states import TERMINAL, TaskStatus
from taskfuse.limits.build import heartbeat_interval
from taskfuse.limits.schema import ClientLimits, Limits
from taskfuse.store.redaction import redact_text

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from taskfuse.core.guard import Guard
    from taskfuse.runtime.threads import Runner

#: The longest a scrape waits for the store's counts (Prometheus' default scrape timeout is
#: 10 s; a worker should answer well within it even while its database is down).
STORE_SCRAPE_BUDGET_S = 1.5

log = logging.getLogger("taskfuse.observe")

#: Seconds; batch tasks run from milliseconds (a cache hit) to minutes (a slow partner).
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, float("inf"),
)
#: Seconds a call waited for a bulkhead permit.
WAIT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, float("inf"),
)
HTTP_429 = "http_429"

_RUNNING = TaskStatus.RUNNING.value
_PENDING = TaskStatus.PENDING.value
_TERMINAL = frozenset(s.value for s in TERMINAL)
_RETRYABLE = re.compile(r"retryable '([^']*)'")
#: Starts remembered beyond the worker count before the map is pruned to running tasks.
_PRUNE_AT = 1000


@functools.lru_cache(maxsize=4096)
def label(value: str) -> str:
    """A label value from free text (ids, error kinds) with any credential masked; cached,
    since the same few values recur on every event."""
    return redact_text(str(value))


def retry_kind(reason: str | None) -> str | None:
    """The error kind of a RUNNING -> PENDING move that used up an attempt, else None.

    The core's move reason names it: "retryable 'http_429', retry 1 of 3 in 0.2s" (a
    failure or a timeout), "orphaned: retry 1 of 3" (the sweeper). A breaker-open deferral
    and a release at shutdown use no attempt and are not retries. A test pins these
    formats against the real RetryPolicy and Scheduler.
    """
    if not reason:
        return None
    match = _RETRYABLE.match(reason)
    if match:
        return match.group(1)
    if reason.startswith("orphaned: retry"):
        return "orphaned"
    return None


class WorkerMetrics:
    """The metrics of one Runner on a registry of their own (see the module doc).

    An event sink on the runner's Scheduler: build it before `runner.start()` so no move is
    missed. Sinks get one event at a time (the runner's emit lock); prometheus_client's
    metrics are thread-safe.
    """

    def __init__(
        self,
        runner: Runner,
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.runner = runner
        self.registry = registry if registry is not None else CollectorRegistry()
        self._started: dict[str, float] = {}
        self._declare(buckets)
        self.registry.register(StoreCollector(runner))
        self.registry.register(GuardCollector(runner))
        self.registry.register(LimitsCollector(runner))
        runner.scheduler.emit.add(self)

    def _declare(self, buckets: Sequence[float]) -> None:
        reg = self.registry
        self.finished = Counter("taskfuse_tasks_finished", "Tasks this process moved to a "
                                "terminal status, by status.", ["status"], registry=reg)
        self.durations = Histogram("taskfuse_task_duration_seconds", "Duration of the attempt "
                                   "that ended a task (started_at to the end), per batch.",
                                   ["batch"], buckets=buckets, registry=reg)
        self.retries = Counter("taskfuse_task_retries", "Attempts that failed and were "
                               "scheduled again, by error kind.", ["kind"], registry=reg)
        self.deferred = Counter("taskfuse_tasks_deferred", "Tasks sent back to PENDING "
                                "without using an attempt because a breaker was open.",
                                registry=reg)
        self.calls = Counter("taskfuse_downstream_calls", "Calls to a downstream that ended "
                             "(admitted by its fuses).", ["downstream"], registry=reg)
        self.errors = Counter("taskfuse_downstream_errors", "Downstream calls that raised, by "
                              "error kind.", ["downstream", "kind"], registry=reg)
        self.throttled = Counter("taskfuse_downstream_http_429", "Downstream calls answered "
                                 "429 Too Many Requests (kind http_429).", ["downstream"],
                                 registry=reg)
        self.waits = Histogram("taskfuse_downstream_permit_wait_seconds", "Time a call waited "
                               "in a bulkhead's queue for a permit.", ["downstream"],
                               buckets=WAIT_BUCKETS, registry=reg)
        self.breaker_moves = Counter("taskfuse_downstream_breaker_transitions", "Circuit "
                                     "breaker state changes, by the state entered.",
                                     ["downstream", "state"], registry=reg)
        self._zero_known_series()

    def _zero_known_series(self) -> None:
        """Export known label values at 0 from the start, so rate() sees the first increase."""
        for status in sorted(_TERMINAL):
            self.finished.labels(status)
        for name in self.runner.scheduler.guards:
            self.calls.labels(name)
            self.throttled.labels(name)

    def __call__(self, event: Event) -> None:
        """The event sink: counts moves, calls, waits and breaker changes of this process."""
        kind = event.kind
        if kind == EventKind.MOVE:
            self._move(event)
        elif kind == EventKind.CALL:
            self._call(event)
        elif kind == EventKind.WAIT and event.reason == "bulkhead" and event.subject:
            self.waits.labels(event.subject).observe(event.value or 0.0)
        elif kind == EventKind.BREAKER and event.subject and event.dst:
            self.breaker_moves.labels(event.subject, event.dst).inc()

    def _move(self, event: Event) -> None:
        task_id = event.task_id or ""
        if event.dst == _RUNNING:
            if len(self._started) >= _PRUNE_AT + self.runner.workers:
                self._prune()  # before adding: the runner registers this task only after
            self._started[task_id] = event.t
            return
        started = self._started.pop(task_id, None) if event.src == _RUNNING else None
        if event.dst in _TERMINAL:
            self.finished.labels(event.dst).inc()
            if started is not None:
                batch = label(event.batch_id or NO_BATCH)
                self.durations.labels(batch).observe(max(0.0, event.t - started))
        elif event.dst == _PENDING and event.src == _RUNNING:
            kind = retry_kind(event.reason)
            if kind is not None:
                self.retries.labels(label(kind)).inc()
            elif (event.reason or "").startswith("deferred"):
                self.deferred.inc()

    def _prune(self) -> None:
        """Forget starts of tasks no longer running here (another process ended them: a
        cancel, a sweep), so a long-lived worker's map stays as small as its thread count."""
        here = {t.task_id for t in self.runner.running_tasks()}
        self._started = {k: v for k, v in self._started.items() if k in here}

    def _call(self, event: Event) -> None:
        name = event.subject or "?"
        self.calls.labels(name).inc()
        outcome = event.reason or "ok"
        if outcome != "ok":
            self.errors.labels(name, label(outcome)).inc()
            if outcome == HTTP_429:
                self.throttled.labels(name).inc()


class StoreCollector(Collector):
    """Task counts from the store at scrape time: the same number from every worker.

    A scrape never waits longer than `budget_s` for the store: the count runs in a thread of
    its own, and a store that fails or has not answered in time is reported as
    `taskfuse_store_up 0` with the last counts it gave (and their age), so a scrape during a
    database outage answers at once and the per-process series stay visible.
    """

    def __init__(self, runner: Runner, budget_s: float = STORE_SCRAPE_BUDGET_S) -> None:
        self.runner = runner
        self.budget_s = budget_s
        self._lock = threading.Lock()
        self._pending: threading.Thread | None = None
        self._done = threading.Event()
        self._last: dict[str, int] | None = None
        self._last_at: float | None = None
        self._last_took = 0.0
        self._last_error: str | None = None

    def describe(self) -> Iterable[Metric]:
        """Nothing: describing would query the store when the collector is registered."""
        return []

    def _count(self) -> None:
        began = time.monotonic()
        try:
            counts = self.runner.counts()
        except Exception as exc:
            log.warning("metrics scrape: store counts failed: %s", exc)
            with self._lock:
                self._last_error = str(exc)
        else:
            with self._lock:
                self._last = {s.value: int(counts.get(s, 0)) for s in TaskStatus}
                self._last_at = time.time()
                self._last_took = time.monotonic() - began
                self._last_error = None
        finally:
            with self._lock:
                self._pending = None
            self._done.set()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._pending is None:  # one count at a time, however many scrapes wait
                self._done.clear()
                asked = time.time()
                self._pending = threading.Thread(target=self._count, daemon=True,
                                                 name="taskfuse-metrics-count")
                self._pending.start()
            else:
                asked = None
        self._done.wait(self.budget_s)
        with self._lock:
            fresh = (asked is not None and self._last_at is not None
                     and self._last_at >= asked and self._last_error is None)
            counts, at, took = self._last, self._last_at, self._last_took
        yield _gauge("taskfuse_store_up", "1 if the store answered this scrape in time.",
                     1 if fresh else 0)
        if at is not None:
            yield _gauge("taskfuse_store_last_answer_timestamp_seconds", "When the store last "
                         "answered a count (the counts below are from then).", at)
        if counts is None:
            return
        yield _gauge("taskfuse_store_query_seconds", "Time the store took to count tasks "
                     "the last time it answered.", took)
        yield from _count_families(counts)


def _count_families(counts: dict[str, int]) -> Iterator[Metric]:
    """The store-wide families: per status, the two named ones, and the success ratio."""
    tasks = GaugeMetricFamily("taskfuse_tasks", "Tasks in the store by status (fleet-wide).",
                              labels=["status"])
    for status, n in counts.items():
        tasks.add_metric([status], n)
    yield tasks
    yield _gauge("taskfuse_queue_depth", "Tasks PENDING in the store (fleet-wide).",
                 counts[_PENDING])
    yield _gauge("taskfuse_tasks_running", "Tasks RUNNING in the store (fleet-wide).",
                 counts[_RUNNING])
    ok, failed = counts[TaskStatus.SUCCESS.value], counts[TaskStatus.FAILED.value]
    if ok + failed:  # no sample at all rather than a made-up 1.0 or NaN
        yield _gauge("taskfuse_success_ratio", "SUCCESS / (SUCCESS + FAILED) over the "
                     "tasks in the store (fleet-wide).", ok / (ok + failed))


class GuardCollector(Collector):
    """This process's worker threads and fuses, read under the runner's lock at scrape time."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        runner = self.runner
        info = InfoMetricFamily("taskfuse_worker", "This worker process.")
        info.add_metric([], {"worker_id": label(runner.worker_id), "app": label(runner.app.name)})
        yield info
        yield _gauge("taskfuse_worker_threads", "Worker threads of this process: its share "
                     "of the fleet's running limit.", runner.workers)
        busy = len(runner.running_tasks())
        stuck = runner.stuck_threads()
        with runner.lock:
            now = runner.clock()
            families = _guard_families(list(runner.scheduler.guards.values()), now)
        yield _gauge("taskfuse_worker_busy_threads", "Tasks this process is running now.", busy)
        lag, lag_max = runner.loop_lag()
        yield _gauge("taskfuse_worker_loop_lag_seconds", "How late the event loop of async "
                     "tasks answered its last ping (a task blocking it delays every one).", lag)
        yield _gauge("taskfuse_worker_loop_lag_max_seconds", "The largest event loop lag "
                     "seen since the worker started.", lag_max)
        yield from _stuck_families(stuck)
        yield from families
        yield from _pool_families(runner)
        retries = CounterMetricFamily("taskfuse_downstream_call_retries", "Attempts of "
                                      "ctx.downstream().call retried by the client's policy.",
                                      labels=["downstream"])
        for name, client in sorted(runner.clients.items()):
            retries.add_metric([name], client.retries)
        yield retries


def _pool_families(runner: Runner) -> list[Metric]:
    """Each pool section of this process: permits held, callers waiting, timeouts."""
    in_use = _labelled("taskfuse_pool_in_use", "Permits of the pool section held.", "pool")
    waiting = _labelled("taskfuse_pool_waiting", "Callers queued for a permit.", "pool")
    timeouts = CounterMetricFamily("taskfuse_pool_timeouts", "Waits for a permit that "
                                   "ended in pool_timeout.", labels=["pool"])
    for name, section in sorted(runner.pools.items()):
        in_use.add_metric([name], section.in_use)
        waiting.add_metric([name], section.waiting)
        timeouts.add_metric([name], section.timeouts)
    return [in_use, waiting, timeouts]


class LimitsCollector(Collector):
    """The limits this worker runs with, as configured (see the module doc)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        limits = self.runner.app.limits
        workers: float = self.runner.workers  # what runs, when the limits do not say
        if "workers" in limits.model_fields_set:
            workers = limits.workers if isinstance(limits.workers, int) else math.inf
        yield _gauge("taskfuse_workers_limit", "Worker threads the limits ask for (per "
                     "process).", float(workers))
        task = GaugeMetricFamily("taskfuse_task_limit", "The task lifecycle's limits.",
                                 labels=["fuse"])
        for fuse, value in task_limits(limits).items():
            task.add_metric([fuse], value)
        yield task
        ds = GaugeMetricFamily("taskfuse_limit", "A downstream's configured fuse: bulkhead, "
                               "rate, burst, timeout_s, call_max_retry, ...",
                               labels=["downstream", "fuse"])
        for name, downstream in sorted(limits.downstreams.items()):
            for fuse, value in client_limits(downstream.client).items():
                ds.add_metric([name, fuse], value)
        yield ds
        pools = GaugeMetricFamily("taskfuse_pool_limit", "A pool section's configured size "
                                  "and acquire timeout.", labels=["pool", "fuse"])
        for name, pool in sorted(limits.pools.items()):
            pools.add_metric([name, "size"], pool.size)
            pools.add_metric([name, "acquire_timeout_s"], pool.acquire_timeout_s)
        yield pools
        batches = GaugeMetricFamily("taskfuse_batch_limit", "A batch's configured cap.",
                                    labels=["batch", "fuse"])
        for batch in limits.batches:
            if batch.cap is not None:
                batches.add_metric([batch.id, "cap"], batch.cap)
        yield batches


def task_limits(limits: Limits) -> dict[str, float]:
    """The task lifecycle's limits as numbers (the `fuse` label of taskfuse_task_limit)."""
    out = {"timeout_s": limits.task_timeout_s, "max_retry": float(limits.retry.max_retry),
           "watchdog_interval_s": limits.watchdog_interval_s,
           "sweeper_interval_s": limits.sweeper.interval_s}
    if limits.sweeper.lease_s is not None:
        out["lease_s"] = limits.sweeper.lease_s
        out["heartbeat_s"] = heartbeat_interval(limits)
    if limits.sweeper.max_pending_age_s is not None:
        out["max_pending_age_s"] = limits.sweeper.max_pending_age_s
    return out


def client_limits(client: ClientLimits) -> dict[str, float]:
    """A downstream's configured fuses as numbers (the `fuse` label of taskfuse_limit).

    Whole values, as in the file; with `instances: N` this process runs its share of them
    (the built share is `taskfuse_downstream_bulkhead_limit`).
    """
    out: dict[str, float] = {}
    if client.bulkhead is not None:
        out["bulkhead"] = client.bulkhead
    if client.adaptive is not None:
        out["adaptive_min"] = client.adaptive.min
        out["adaptive_max"] = client.adaptive.max
    if client.rate_limit is not None:
        out["rate"] = client.rate_limit.rate
        out["burst"] = client.rate_limit.burst
    if client.timeout_s is not None:
        out["timeout_s"] = client.timeout_s
    out["call_max_retry"] = client.retry.max_retry
    if client.breaker is not None:
        out["breaker_failure_rate"] = client.breaker.failure_rate
        out["breaker_open_wait_s"] = client.breaker.open_wait_s
    if client.scope == "process" and client.instances > 1:
        out["instances"] = client.instances
    return out


def _stuck_families(stuck: list[dict[str, object]]) -> Iterator[Metric]:
    """Threads (and coroutines) still busy with a task that is no longer RUNNING (it
    ignored its stop), per kind, and how long the oldest has been stuck."""
    coroutines = sum(1 for entry in stuck if entry.get("coroutine"))
    total = GaugeMetricFamily("taskfuse_worker_stuck_threads", "Worker threads busy with a "
                              "task that is no longer RUNNING (it ignored its timeout or "
                              "cancel).", value=len(stuck) - coroutines)
    aio = GaugeMetricFamily("taskfuse_worker_stuck_coroutines", "Coroutines still running "
                            "a task that is no longer RUNNING (they swallowed the "
                            "CancelledError of its timeout or cancel).", value=coroutines)
    count = GaugeMetricFamily("taskfuse_worker_stuck_threads_by_kind", "Stuck worker threads "
                              "(and coroutines, of async kinds) by the kind of the task they "
                              "are stuck on.", labels=["kind"])
    oldest = GaugeMetricFamily("taskfuse_worker_stuck_seconds", "How long the longest-stuck "
                               "thread of each kind has been stuck.", labels=["kind"])
    by_kind: dict[str, list[float]] = {}
    for entry in stuck:
        by_kind.setdefault(str(entry["kind"]), []).append(float(entry["for_s"]))  # type: ignore[arg-type]
    for kind, ages in sorted(by_kind.items()):
        count.add_metric([label(kind)], len(ages))
        oldest.add_metric([label(kind)], max(ages))
    yield total
    yield aio
    yield count
    yield oldest


def _guard_families(guards: list[Guard], now: float) -> list[Metric]:
    """Breaker state, bulkhead and token bucket of each downstream (runner lock held)."""
    state = GaugeMetricFamily("taskfuse_downstream_breaker_state", "1 for the state the "
                              "downstream's circuit breaker is in.",
                              labels=["downstream", "state"])
    in_use = _labelled("taskfuse_downstream_bulkhead_in_use", "Bulkhead permits held.")
    limit = _labelled("taskfuse_downstream_bulkhead_limit", "Bulkhead size (adaptive or fixed).")
    waiting = _labelled("taskfuse_downstream_bulkhead_waiting", "Calls queued for a permit.")
    tokens = _labelled("taskfuse_downstream_tokens", "Tokens in the client-side token bucket.")
    for guard in guards:
        name = guard.name
        if guard.breaker is not None:
            current = guard.breaker.state(now)
            for s in BreakerState:
                state.add_metric([name, s.value], 1.0 if s is current else 0.0)
        if guard.bulkhead is not None:
            in_use.add_metric([name], guard.bulkhead.in_use)
            limit.add_metric([name], guard.bulkhead.limit)
            waiting.add_metric([name], guard.bulkhead.waiting)
        if guard.bucket is not None:
            tokens.add_metric([name], guard.bucket.tokens(now))
    return [state, in_use, limit, waiting, tokens]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _labelled(name: str, doc: str, label: str = "downstream") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[label])


class MetricsServer:
    """A registry's HTTP endpoint (`/metrics`) on a daemon thread; `close()` frees the port."""

    def __init__(self, registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> None:
        self._httpd: WSGIServer
        self._httpd, self._thread = start_http_server(port, addr=addr, registry=registry)
        self.addr = addr

    @property
    def port(self) -> int:
        """The bound port (the one the OS chose when asked for port 0)."""
        return int(self._httpd.server_port)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.addr in ("0.0.0.0", "") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and close the socket (shutdown alone keeps the port bound)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=2.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve `registry` at http://addr:port/metrics (port 0: any free port, see `.port`)."""
    return MetricsServer(registry, port, addr)


def serve_runner(runner: Runner, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """WorkerMetrics for `runner` served on `port`: the worker command's --metrics-port."""
    return serve(WorkerMetrics(runner).registry, port, addr)


__all__ = [
    "DURATION_BUCKETS",
    "GuardCollector",
    "LimitsCollector",
    "MetricsServer",
    "StoreCollector",
    "WorkerMetrics",
    "retry_kind",
    "serve",
    "serve_runner",
]
