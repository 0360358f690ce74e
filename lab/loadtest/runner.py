"""Run a scenario for real, end to end: `run_loadtest` is what `lab loadtest` calls.

The order of a run, and why:

1. scale the scenario by F (scale.py): every real wait uses the scaled file;
2. start the emulated downstreams (a child process), open the real pools and the store,
   build the runtime through its public path only (an App from the scenario's limits,
   as `taskfuse worker --limits` builds one; task code calls `ctx.downstream(name).call`
   and `ctx.pool(name)`), the business load and the trace — each registered on one
   ExitStack, so Ctrl-C, an error or the normal end stops all of them, in reverse order;
3. start: the workers (and the event loop of `async` kinds, whose stream connections
   are opened on it then), time zero goes to the servers (their outage windows count from
   it), the arrival threads (one per batch), the business load, the sampler;
4. wait until every batch has arrived and no task is PENDING or RUNNING (or the horizon);
5. freeze the numbers, stop everything, and build the report with `lab.simulate.report` over a
   Simulation-shaped view (view.py), all in scenario seconds.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lab.loadtest.business import BusinessLoad
from lab.loadtest.client import CALL_ENDED, DownstreamClient, Programs
from lab.loadtest.clock import Clock
from lab.loadtest.connections import AsyncConnections, Connections
from lab.loadtest.harness import HarnessStats, TimedWaits
from lab.loadtest.harness import warnings as harness_warnings
from lab.loadtest.pools import RealPool, libpq_url, open_pools
from lab.loadtest.proctask import ProcessTasks, run_task, tallies, world_of
from lab.loadtest.record import gateway_meta, limits_meta
from lab.loadtest.scale import scale_scenario
from lab.loadtest.servers import ProviderServers
from lab.loadtest.view import make_view
from lab.model.arrivals import TaskFactory, arrivals, duplicates_of
from lab.scenario import BatchSpec, Scenario, ScenarioError, Step
from lab.simulate.report import build_report
from lab.simulate.timeline import TimelineRecorder, header, series_names
from taskfuse.core.events import Event, EventKind
from taskfuse.core.metrics import AlertEvaluator, MetricsAggregator
from taskfuse.core.states import TERMINAL, TaskStatus
from taskfuse.core.storeapi import Store
from taskfuse.core.task import TaskSpec
from taskfuse.limits.build import alert_rules, running_limit, whole_fleet
from taskfuse.runtime import App, Runner
from taskfuse.runtime.sweeper import run_sweeper
from taskfuse.store import open_store, redact_url
from taskfuse.store.memory import MemoryStore
from taskfuse.trace import TraceWriter, compact
from taskfuse.tuning import worker_heap

#: `workers: unbounded` (open loop) becomes this many worker threads at most: the retry
#: storm holds some 2,500 calls at once during its outage, and a blocked thread costs memory,
#: not CPU.
UNBOUNDED_WORKERS = 4000
#: How long time zero waits for the runner's threads to wait for work (0.2 s for 4,000 here).
SETTLE_TIMEOUT_S = 30.0
#: The timeline is sampled at most this often in real seconds (a sample reads the store).
MIN_REAL_SAMPLE_S = 0.05
#: Connections opened to each downstream before the run (at most; one per worker below it).
WARM_CONNECTIONS = 64
#: ... and for the coroutines of `async` kinds (at most; one per slot of the loop below it):
#: thousands of coroutines start their first calls together, and a connection costs the
#: loop a few hundred microseconds to open.
WARM_ASYNC_CONNECTIONS = 1000
#: A thread whose attempt was stopped (timeout, cancel) counts as stuck this long (real
#: seconds) after the stop if it has not returned. The simulator counts it stuck at once;
#: the runtime's default is 1 s. A quarter second is long against a thread that honours
#: its stop or kills its task process (a few milliseconds), short against a real hang.
STUCK_AFTER_REAL_S = 0.25
_TERMINAL = frozenset(s.value for s in TERMINAL)
_SCALED_VALUES = (EventKind.CALL, EventKind.WAIT)


@dataclass
class LoadTestResult:
    report: dict[str, Any]
    wall_s: float
    trace: Path | None


def run_loadtest(scenario: Scenario, *, time_scale: float = 1.0, store_url: str | None = None,
                 trace: Path | None = None, seed: int | None = None,
                 progress: bool = False, announce: Callable[[str], None] | None = None,
                 ) -> LoadTestResult:
    """Run `scenario` for real (see module doc) and return its report in scenario seconds.

    `announce` is told one line per started part (the servers' ports, the pools), so an
    operator, or a test, can see what is running where.
    """
    return LoadTest(scenario, time_scale=time_scale, store_url=store_url, trace=trace,
                    seed=seed, progress=progress, announce=announce).run()


# -- events: the runtime's wall clock in, scenario seconds out -----------------------------


class EventSink:
    """Rescales runtime events to scenario seconds and feeds the metrics and the trace."""

    def __init__(self, clock: Clock, metrics: MetricsAggregator) -> None:
        self.clock = clock
        self.metrics = metrics
        self.writer: TraceWriter | None = None
        self.lock = threading.Lock()
        self.last_end: float | None = None
        self.frozen = False
        #: Attempts and calls of `process` kinds, which only the runtime's events show.
        self.processes: ProcessTasks | None = None
        self.calls: dict[str, Any] = {}

    def __call__(self, event: Event) -> None:
        """From the runtime, one event at a time (its emit lock held, sometimes its fuse
        lock too): wall-clock time, real-second values."""
        clock = self.clock
        value = event.value
        if event.kind in _SCALED_VALUES and value is not None:
            value = clock.scenario(value)
        t = clock.from_wall(event.t)
        if event.kind == EventKind.CALL:  # when the request ended, not when the lock was had
            ended = getattr(CALL_ENDED, "at", None)
            CALL_ENDED.at = None
            if ended is not None:
                t = clock.scenario(ended - clock.t0_mono)
        scaled = event._replace(t=t, value=value)
        if not self.frozen:
            self.metrics(scaled)
            if event.kind == EventKind.MOVE and event.dst in _TERMINAL:
                self.last_end = scaled.t
            if self.processes is not None:
                self.processes.event(scaled, self.calls)
        self.scenario_event(scaled)

    def scenario_event(self, event: Event) -> None:
        """An event already in scenario seconds (alerts, the gateway's breaker)."""
        with self.lock:
            writer = self.writer
            if writer is not None and not writer.closed:
                writer.event(compact(event))


# -- the run -------------------------------------------------------------------------------


class LoadTest:
    """One real run of a scenario; `run()` builds, runs, stops and reports (module doc)."""

    def __init__(self, scenario: Scenario, *, time_scale: float, store_url: str | None,
                 trace: Path | None, seed: int | None, progress: bool,
                 announce: Callable[[str], None] | None) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.scaled = scale_scenario(scenario, time_scale)
        self.clock = Clock(time_scale)
        self.store_url = store_url
        self.trace_path = trace
        self.progress = progress
        self.announce = announce or (lambda line: None)
        self.stopping = threading.Event()
        self.async_kinds = _async_kinds(self.scaled)
        self.workers = _worker_count(self.scaled, self.async_kinds)
        self.metrics = MetricsAggregator()
        self.sink = EventSink(self.clock, self.metrics)
        self.unsupported = _unsupported(scenario)
        self.harness = HarnessStats()
        self.submitted = 0
        self.duplicates = 0
        self._submit_lock = threading.Lock()

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` (real); True when the run is stopping (the caller should unwind).
        How late each wait woke is the harness's (harness.py)."""
        if seconds <= 0:
            return self.stopping.is_set()
        return self.harness.timed_wait(self.stopping.wait, seconds)

    async def apause(self, seconds: float) -> bool:
        """`pause` in a coroutine of an `async` kind: a loop timer (the runner's stop
        cancels the coroutine; this says whether the run is stopping)."""
        if seconds > 0:
            await self.harness.timed_sleep(seconds)
        return self.stopping.is_set()

    # -- building --------------------------------------------------------------------------

    def run(self) -> LoadTestResult:
        started = time.perf_counter()
        with ExitStack() as stack:
            stack.callback(self.stopping.set)
            self._build(stack)
            self._start(stack)
            self._wait()
            report = self._finish()
        return LoadTestResult(report, time.perf_counter() - started, self.trace_path)

    def _build(self, stack: ExitStack) -> None:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="loadtest-")))
        self.world_path = workdir / "process-world.json"
        self.servers = stack.enter_context(ProviderServers(
            {n: d.provider for n, d in self.scaled.downstreams.items()}, self.seed))
        for name, port in self.servers.ports.items():
            self.announce(f"server {name} on 127.0.0.1:{port} (pid {self.servers.pids[name]})")
        self.pools = open_pools(dict(self.scaled.pools), self.clock, self.store_url, workdir)
        stack.callback(_close_all, self.pools)
        self.store = stack.enter_context(_task_store(self.store_url))
        self.clients = self._clients(stack)
        self.programs = Programs(self.pools, self.clients, self.clock, self.seed, self.pause,
                                 self.apause)
        # One process runs the whole fleet here, so every limit is built whole (as the
        # simulator builds it); the seed makes trace ids and jitter the simulator's.
        self.app = App.from_limits(whole_fleet(self.scaled.limits()), self.scaled.name,
                                   seed=self.seed)
        self.process_kinds = {k for k, v in self.app.limits.kinds.items()
                              if v.executor == "process"}
        #: Programs of `process` kinds by the simulator's program index (the order they
        #: are compiled in), with the most attempts that may run each.
        self.process_programs: dict[int, tuple[list[Step], int]] = {}
        self._compiled = 0
        self.makers = [self._task_factory(batch) for batch in self.scaled.batches]
        self.threads_peak = 0  # threads of this process at once, sampled (the report's)
        self.heap_threshold: int | None = None  # the collector's, while the run ran
        self.runner = Runner(self.app, self.store, workers=self.workers, worker_id="loadtest",
                             sinks=[self.sink], stuck_after_s=STUCK_AFTER_REAL_S,
                             waits=TimedWaits(self.harness))
        if self.process_programs:
            self._process_world()
        for name, pool in self.pools.items():  # the runtime's FIFO section is each pool's queue
            pool.attach(self.runner.pools[name])
        self.business = self._business()
        self.alerts = _alerts(self.sc, self.metrics, self.sink.scenario_event)
        self.view = make_view(
            self._sampled_scenario(), self.seed, self.clock, self.store,
            self.runner.scheduler.guards, {n: c.stats for n, c in self.clients.items()},
            self.pools, self.business.gateway if self.business else None, self.metrics,
            self.alerts, self.workers)
        self.recorder = self._open_trace(stack)

    def _process_world(self) -> None:
        """Programs of `process` kinds run in the runtime's task processes (proctask.py):
        they read their world from a file, and count through the runtime's events."""
        urls = {name: self.servers.url(name) for name in self.scaled.downstreams}
        world = world_of(self.scaled, self.process_programs, urls, self.seed,
                         str(self.world_path.with_suffix(".counters")))
        self.world_path.write_text(json.dumps(world))
        self.sink.processes = ProcessTasks()
        self.sink.calls = {name: client.stats for name, client in self.clients.items()}
        # Task processes fork from the runtime's fork server, and each imports the main
        # module (the lab command: half a second of imports on this machine, longer than
        # a scaled timeout) and the task's module. Loaded in the server once, they cost a
        # respawned process nothing: the scenario's respawn is the kill and the fork, not
        # this harness's imports. The server preloads what the main module imports (its
        # own "__main__" preload needs a key Python 3.11 does not pass). No effect if the
        # server already runs.
        multiprocessing.get_context("forkserver").set_forkserver_preload(
            ["taskfuse.runtime.procworker", "lab.loadtest.proctask", "lab.loadtest.runner",
             "lab.cli"])
        # Started (and its preloads done) now rather than by the first task: a worker that
        # has run for a while has its fork server, and the simulator has no start-up.
        warm = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
        warm.start()
        warm.join()

    def _clients(self, stack: ExitStack) -> dict[str, DownstreamClient]:
        clients = {}
        for name, spec in self.scaled.downstreams.items():
            url = self.servers.url(name)
            http = stack.enter_context(Connections(url))
            ahttp = None
            if self.async_kinds:  # opened on the runtime's event loop (`_warm_async`)
                ahttp = AsyncConnections(url)
                stack.callback(ahttp.close)
            clients[name] = DownstreamClient(name, spec, url, self.clock, http, self.harness,
                                             ahttp)
            if self._thread_kinds():
                clients[name].warm(min(self.workers, WARM_CONNECTIONS))
        return clients

    def _thread_kinds(self) -> bool:
        """Whether a batch's kind runs on the worker threads (or their task processes)."""
        return any(k not in self.async_kinds for k in _batch_kinds(self.scaled))

    def _warm_async(self) -> None:
        """Open the coroutines' connections on the runtime's event loop, where every
        coroutine of an `async` kind runs (streams belong to the loop that opened them).
        The Runner's public API has no way to run a coroutine on its loop before any task:
        `runner.aio.loop` is read for it."""
        loop = getattr(self.runner.aio, "loop", None)
        if loop is None:
            raise RuntimeError("the runner started no event loop for the async kinds")
        cap = self.app.limits.async_concurrency
        n = min(cap, WARM_ASYNC_CONNECTIONS)
        for client in self.clients.values():
            asyncio.run_coroutine_threadsafe(client.awarm(n), loop).result(SETTLE_TIMEOUT_S)

    def _business(self) -> BusinessLoad | None:
        spec, real = self.sc.business, self.scaled.business
        if spec is None or real is None:
            return None
        return BusinessLoad(spec, real, self.pools[spec.pool], self.clock, self.seed,
                            self.sink.scenario_event)

    def _sampled_scenario(self) -> Scenario:
        """The scenario as the timeline sees it: sampled no faster than the machine allows."""
        interval = max(self.sc.sample_interval_s, MIN_REAL_SAMPLE_S / self.clock.scale)
        return self.sc.model_copy(update={"sample_interval_s": interval})

    def _open_trace(self, stack: ExitStack) -> TimelineRecorder | None:
        if self.trace_path is None:
            return None
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        head = header(self.view, series_names(self.view))  # type: ignore[arg-type]
        head["source"] = "loadtest"
        head["meta"]["time_scale"] = self.clock.scale
        head["meta"]["store"] = self._store_name()
        head["meta"]["limits"] = limits_meta(self.sc)  # what `lab fit` writes back beside
        head["meta"]["limits_file"] = self.sc.limits_source  # and the file they came from
        head["meta"]["gateway"] = gateway_meta(self.sc)  # the world it estimates
        writer = TraceWriter(self.trace_path, head, flush_every=5_000)
        stack.callback(writer.abort)  # no footer unless the run completed
        self.sink.writer = writer
        self.programs.record.emit = self.sink.scenario_event
        if self.business is not None:
            self.business.record.emit = self.sink.scenario_event
        return TimelineRecorder(self.view, writer)  # type: ignore[arg-type]

    def _store_name(self) -> str:
        return redact_url(self.store_url) if self.store_url else "memory://"

    # -- running ---------------------------------------------------------------------------

    def _start(self, stack: ExitStack) -> None:
        # Time zero once the runner is up: starting 4,000 threads (an unbounded scenario)
        # takes over a second, and arrivals due meanwhile would all be submitted at once.
        self.runner.start()
        stack.callback(self._stop_runner)
        self.runner.wait_settled(SETTLE_TIMEOUT_S)
        if self.async_kinds:
            self._warm_async()
        # The heap as `taskfuse worker` keeps its own: a full collection pauses every thread,
        # and with thousands of attempts in flight it rescans them all, a pause a real worker
        # does not take.
        stack.enter_context(worker_heap())
        self.heap_threshold = gc.get_threshold()[0]
        self.clock.restart()
        self.servers.begin(self.clock.t0_wall)
        for batch in self.scaled.batches:
            self.runner.submit_batch([], batch.id, cap=batch.cap)
        self.arrivals = [self._thread(self._arrivals, f"loadtest-arrivals-{i}", batch, make)
                         for i, (batch, make) in enumerate(zip(self.scaled.batches, self.makers,
                                                               strict=True))]
        if self.business is not None:
            self.business.start()
            stack.callback(self.business.stop)
        stack.callback(self._interrupt_pools)  # first of all, so no one waits for a connection
        self.sampler = self._thread(self._sample_loop, "loadtest-sampler")
        self.sweeper = self._thread(self._sweep_loop, "loadtest-sweeper")
        stack.callback(self._join_helpers)

    def _thread(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, args=args, daemon=True)
        thread.start()
        return thread

    def _wait(self) -> None:
        """Until every batch arrived and every task ended, or the horizon (real time)."""
        horizon = self.clock.real(self.sc.horizon_s)
        for thread in self.arrivals:
            thread.join(max(0.0, horizon - self.clock.elapsed()))
        while not self.stopping.is_set():
            left = horizon - self.clock.elapsed()
            if left <= 0 or (self._arrived() and self.runner.join(timeout=min(left, 0.5))):
                return

    def _arrived(self) -> bool:
        return not any(t.is_alive() for t in self.arrivals)

    def _finish(self) -> dict[str, Any]:
        """Freeze the numbers at this moment, stop everything, build the report."""
        with self.runner.lock:
            self.sink.frozen = True
            counts = self.store.counts()
            settled = self._arrived() and not (counts.get(TaskStatus.PENDING)
                                               or counts.get(TaskStatus.RUNNING))
            self.view.stopped_at = self.clock.now()
            self.view.ended_at = (self.sink.last_end or 0.0) if settled else None
            self._sample()
            self._freeze()
        self.stopping.set()
        self._interrupt_pools()
        if self.business is not None:
            self.business.stop()
        self._stop_runner()
        if self.progress:
            sys.stderr.write("\r" + " " * 60 + "\r")
        server_stats = self.servers.stats()
        self._fill_stats(server_stats)
        report = build_report(self.view)  # type: ignore[arg-type]
        report["loadtest"] = self._extras(server_stats)
        harness = self.harness.summary(self.clock.scale)
        report["loadtest"]["harness"] = harness
        report["loadtest"]["warnings"] = harness_warnings(harness)
        if self.sink.writer is not None:
            with self.sink.lock:
                self.sink.writer.close(report)
        return report

    def _fill_stats(self, server_stats: dict[str, Any]) -> None:
        stats, program = self.view.stats, self.programs.stats
        stats.attempts = program.attempts
        stats.first_waits = program.first_waits
        stats.deferred = program.deferred
        stats.lost_races = self.runner.stats.discarded
        stats.submitted = self.submitted
        stats.duplicates = self.duplicates
        runner = self.runner.stats
        stats.replaced, stats.retired = runner.replaced, runner.retired
        stats.killed = self.runner.procs.killed
        processes = self.sink.processes
        if processes is not None:
            stats.attempts += processes.attempts
            stats.first_waits = [*stats.first_waits, *processes.first_waits]
            counted = tallies(str(self.world_path))
            for name, client in self.clients.items():
                client.stats.max_in_flight = max(client.stats.max_in_flight,
                                                 processes.max_in_flight(name))
                retries, rejected = counted.get(name, (0, 0))
                client.stats.retries += retries
                client.stats.rejected += rejected
        for name, ds in self.view.downstreams.items():
            ds.provider.abandoned = int(server_stats.get(name, {}).get("abandoned", 0))

    def _extras(self, server_stats: dict[str, Any]) -> dict[str, Any]:
        """What only a real run has: the scale, the parts used, the servers' own counts."""
        pools = "postgresql" if isinstance(self.store, _PG_STORES) else "sqlite"
        return {
            "time_scale": self.clock.scale,
            "store": self._store_name(),
            "pools": pools if self.pools else None,
            "workers": self.workers,
            "executors": {kind: ("async" if kind in self.async_kinds else
                                 self.app.definition(kind).executor)
                          for kind in sorted(self.app.tasks)},
            "threads_peak": self.threads_peak,
            "gc_threshold": self.heap_threshold,
            "loop_lag_max_s": (round(self.clock.scenario(self.runner.loop_lag()[1]), 6)
                               if self.async_kinds else None),
            "servers": server_stats,
            "business_dropped": self.business.dropped if self.business else 0,
            "unsupported": self.unsupported,
        }

    def _freeze(self) -> None:
        """Count nothing after this moment (calls and requests still in flight included)."""
        for client in self.clients.values():
            with client.stats.lock:
                client.stats.frozen = True
        if self.business is not None:
            with self.business.gateway.lock:
                self.business.gateway.frozen = True

    def _interrupt_pools(self) -> None:
        for pool in self.pools.values():
            pool.interrupt()

    def _stop_runner(self) -> None:
        self.stopping.set()
        self.runner.shutdown(grace_s=2.0)

    def _join_helpers(self) -> None:
        self.stopping.set()
        for thread in [*self.arrivals, self.sampler, self.sweeper]:
            thread.join(timeout=5.0)

    # -- arrivals --------------------------------------------------------------------------

    def _task_factory(self, batch: BatchSpec) -> TaskFactory:
        """Task specs of one arrival, made by the simulator's own factory (ids, DAG, keys)."""
        for kind in {batch.kind, *(c.kind for c in batch.children)}:
            if kind not in self.app.tasks:
                process = kind in self.process_kinds  # the runtime moves it to a process
                fn = (self.programs.arun if kind in self.async_kinds else
                      run_task if process else self.programs.run)
                self.app.task(kind)(fn)
        return TaskFactory(batch, self.scaled, self._payload(batch.kind, batch.program),
                           [self._payload(c.kind, c.program) for c in batch.children],
                           self.seed)

    def _payload(self, kind: str, program: list[Step]) -> Any:
        """What a task of `kind` is given: its compiled program's index on a thread; for a
        `process` kind, where a task process finds the program (proctask.py)."""
        index, self._compiled = self._compiled, self._compiled + 1
        if kind not in self.process_kinds:
            return self.programs.compile(program)
        self.process_programs[index] = (program, self._most_attempts())
        return {"world": str(self.world_path), "program": index}

    def _most_attempts(self) -> int:
        """Attempts that may reach a step of one program, at most (deferrals aside)."""
        sc = self.scaled
        retries = [sc.retry.max_retry, *(k.max_retry or 0 for k in sc.kinds.values()),
                   *(b.max_retry or 0 for b in sc.batches)]
        return sum(b.most_tasks for b in sc.batches) * (1 + max(retries)) + 16

    def _arrivals(self, batch: BatchSpec, make: TaskFactory) -> None:
        """One batch's arrivals in real time, at the simulator's arrival times."""
        times = arrivals(batch.arrival, batch.count, self.scaled.horizon_s,
                         random.Random(f"{self.seed}:arrivals:{batch.id}"))
        for at, first, end in times:
            if self.pause(at - self.clock.elapsed()):
                return
            self._submit(make.many(first, end), batch)

    def _submit(self, specs: list[TaskSpec], batch: BatchSpec) -> None:
        if not specs:
            return
        if self.sink.processes is not None:  # before the submit: its events must match
            self.sink.processes.add([s.task_id for s in specs
                                     if s.kind in self.process_kinds and s.task_id])
        self.runner.submit_many(specs, batch_id=batch.id)
        again = duplicates_of(specs, batch, self.seed)
        if again:
            self.runner.submit_many(again, batch_id=batch.id)
        with self._submit_lock:
            self.submitted += len(specs)
            self.duplicates += len(again)

    # -- periodic helpers ------------------------------------------------------------------

    def _sample_loop(self) -> None:
        interval = self.clock.real(self.view.sc.sample_interval_s)
        while not self.stopping.is_set():
            with self.runner.lock:
                if self.sink.frozen:
                    return
                self._sample()
            self.stopping.wait(interval)

    def _sample(self) -> None:
        """Alerts and one timeline row at scenario-time now (runner lock held)."""
        now = self.clock.now()
        self.threads_peak = max(self.threads_peak, threading.active_count())
        gateway = self.business.gateway.lock if self.business else nullcontext()
        with gateway:
            stuck = len(self.runner.stuck_threads())
            self.metrics.stuck_share = stuck / self.workers
            stats = self.view.stats  # sampled: hangs last far longer than a sample's interval
            stats.stuck_changed(now, stuck - stats.stuck)
            self.alerts.evaluate(now)
            if self.recorder is not None:
                row = self.recorder.row(self.view, now)  # type: ignore[arg-type]
                with self.sink.lock:
                    self.recorder.writer.sample(round(now, 6), row)
                    self.recorder.writer.flush()
        if self.progress:
            _progress(now, self.sc.horizon_s)

    def _sweep_loop(self) -> None:
        """The orphan sweeper, on the scenario's interval (the simulator runs it too): the
        runtime's own loop, passes under the fuse lock, a move wakes the claimer."""
        run_sweeper(self.runner.scheduler, every_s=self.scaled.sweeper.interval_s,
                    stop=self.stopping, clock=self.runner.clock, lock=self.runner.lock,
                    on_moved=lambda _moved: self.runner.work_changed())


# -- helpers -------------------------------------------------------------------------------

_PG_STORES: tuple[type, ...] = ()
try:  # the PostgreSQL store is optional at import time
    from taskfuse.store.postgres import PostgresStore

    _PG_STORES = (PostgresStore,)
except ImportError:  # pragma: no cover
    pass


def _async_kinds(scenario: Scenario) -> frozenset[str]:
    """Kinds the scenario runs on the event loop (`kinds.KIND.executor: async`)."""
    return frozenset(k for k, v in scenario.kinds.items() if v.executor == "async")


def _batch_kinds(scenario: Scenario) -> set[str]:
    return {k for b in scenario.batches for k in (b.kind, *(c.kind for c in b.children))}


def _worker_count(scenario: Scenario, async_kinds: frozenset[str] = frozenset()) -> int:
    """Worker threads: the scenario's; one when every kind is `async` (the threads would
    have nothing to run: the coroutines run on the event loop, bounded by
    `async_concurrency`); for `unbounded`, one per task of a thread or process kind, up
    to UNBOUNDED_WORKERS."""
    threaded = [b for b in scenario.batches if b.kind not in async_kinds
                or any(c.kind not in async_kinds for c in b.children)]
    if not threaded:
        return 1
    if scenario.workers != "unbounded":
        return int(scenario.workers)
    total = sum(b.count * (1 + len(b.children)) for b in threaded)
    return max(1, min(total, UNBOUNDED_WORKERS))


def _unsupported(scenario: Scenario) -> list[str]:
    """What a real run does not reproduce (stated in the report, never silently)."""
    notes = []
    if scenario.faults:
        notes.append("faults: worker crashes are not injected (threads are never killed)")
    if scenario.claim_batch > 1:
        notes.append("claim_batch: the runtime's threads share one queue of claimed tasks")
    if scenario.workers == "unbounded" and _worker_count(scenario, _async_kinds(scenario)) > 1:
        notes.append(f"workers: unbounded runs as at most {UNBOUNDED_WORKERS} worker threads")
    process = sorted(k for k, v in scenario.kinds.items() if v.executor == "process")
    if process:
        notes.append(f"executor: process ({', '.join(process)}): calls made from task "
                     "processes are not in the harness's overhead figures")
    return notes




def _alerts(sc: Scenario, metrics: MetricsAggregator, emit: Callable[[Event], None]
            ) -> AlertEvaluator:
    """The simulator's alert rules (the one builder), on scenario seconds."""
    limits = sc.limits()
    rules = alert_rules(limits.alerts, running_limit(limits))
    return AlertEvaluator(rules, metrics, emit, p99_baseline_s=limits.alerts.p99_baseline_s)


def _close_all(pools: dict[str, RealPool]) -> None:
    for pool in pools.values():
        pool.close()


@contextmanager
def _task_store(url: str | None) -> Iterator[Store]:
    """The task store: in memory by default; a PostgreSQL run gets a schema of its own,
    dropped at the end; a SQLite file must not hold tasks already (ids would collide)."""
    if url is None or urlsplit(url).scheme == "memory":
        yield MemoryStore()
        return
    schema = None
    if urlsplit(url).scheme in ("postgresql", "postgres"):
        schema = f"loadtest_{uuid.uuid4().hex[:12]}"
        url = _with_param(url, "schema", schema)
    store = open_store(url)
    try:
        if any(store.counts().values()):
            raise ScenarioError(f"--store {redact_url(url)}: the store already holds tasks; "
                                "give a new file")
        yield store
    finally:
        closer = getattr(store, "close", None)
        if callable(closer):
            closer()
        if schema is not None:
            _drop_schema(url, schema)


def _with_param(url: str, key: str, value: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != key] + [(key, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _progress(now: float, horizon: float) -> None:
    pct = int(100 * min(1.0, now / horizon))
    sys.stderr.write(f"\r[{'#' * (pct // 4):<25}] {pct:3d}%  t={now:,.0f}s of {horizon:,.0f}s")
    sys.stderr.flush()
