"""Business traffic for real: an open-loop load generator on the batch's own DB pool.

Requests arrive as a Poisson stream (at the scenario's rate, changing on its schedule) no
matter how slow the answers are — open loop, like k6's arrival-rate executors — because a
closed loop would slow down with the system and hide the very queueing the scenario is
about. Each request takes a connection from the shared pool, runs its query and gives it
back, on a thread of its own (threads are reused; when `max_concurrency` requests are in
flight a new arrival is dropped and counted, as k6 counts dropped iterations).

A gateway stands in front: it answers a timeout after `gateway_timeout_s`, while the backend
keeps waiting for its connection (the request keeps its place in the pool's queue), and
its circuit breaker (the core's CircuitBreaker) refuses requests at once while open. The
gateway runs on scenario seconds, so its breaker uses the scenario's own numbers.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lab.loadtest.pools import PoolError, RealPool
from lab.loadtest.record import DbRecorder
from lab.model.arrivals import poisson_times
from lab.model.business import GatewayCounters
from lab.scenario import Business as BusinessSpec
from taskfuse.core.breaker import BreakerChange, CircuitBreaker
from taskfuse.core.events import Event, EventKind
from taskfuse.limits.build import breaker_config

#: Requests in flight at most; beyond, arrivals are dropped (and counted).
MAX_CONCURRENCY = 2000


class _Request:
    __slots__ = ("answered", "start")

    def __init__(self, start: float) -> None:
        self.start = start  # scenario seconds
        self.answered = False


class Gateway(GatewayCounters):
    """Answers each request once: its response, or a timeout when that comes first."""

    def __init__(self, spec: BusinessSpec, clock: Any,
                 emit: Callable[[Event], None] | None) -> None:
        self.timeout = spec.gateway_timeout_s  # scenario seconds
        self.clock = clock
        self.emit = emit
        super().__init__(CircuitBreaker(breaker_config(spec.breaker), "gateway", self._changed)
                         if spec.breaker is not None else None)
        self.lock = threading.Condition()
        self._deadlines: list[tuple[float, int, _Request]] = []
        self._seq = itertools.count()
        self._stopped = False
        #: Set when the run's numbers are taken: later answers are not observed (a
        #: simulation stops observing at its end too).
        self.frozen = False

    def _changed(self, change: BreakerChange) -> None:
        if self.emit is not None:
            self.emit(Event(change.at, EventKind.BREAKER, None, None, None, change.src.value,
                            change.dst.value, change.reason, None, None, "gateway"))

    def admit(self) -> _Request | None:
        """A new request, or None when the open breaker refuses it."""
        with self.lock:
            now = self.clock.now()
            if self.breaker is not None and not self.breaker.allow(now):
                self.rejected += 1
                return None
            self.requests += 1
            request = _Request(now)
            heapq.heappush(self._deadlines, (now + self.timeout, next(self._seq), request))
            self.lock.notify()
            return request

    def answer(self, request: _Request, ok: bool) -> None:
        """The backend's response (ignored if the gateway already gave up on it)."""
        with self.lock:
            if not request.answered and not self.frozen:
                request.answered = True
                now = self.clock.now()
                self.observe(now, min(now - request.start, self.timeout), ok)

    def watch(self) -> None:
        """The gateway's timer thread: time out requests whose deadline passed unanswered."""
        with self.lock:
            while not self._stopped:
                now = self.clock.now()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, _, request = heapq.heappop(self._deadlines)
                    if not request.answered and not self.frozen:
                        request.answered = True
                        self.timeouts += 1
                        self.observe(now, self.timeout, ok=False)
                wait = (self._deadlines[0][0] - now) if self._deadlines else 1.0
                self.lock.wait(self.clock.real(wait))

    def stop(self) -> None:
        with self.lock:
            self._stopped = True
            self.lock.notify_all()


class BusinessLoad:
    """The arrival thread, the request threads and the gateway; `stop()` ends them all."""

    def __init__(self, spec: BusinessSpec, real_spec: BusinessSpec, pool: RealPool,
                 clock: Any, seed: int, emit: Callable[[Event], None] | None = None,
                 max_concurrency: int = MAX_CONCURRENCY) -> None:
        self.spec = real_spec  # scaled: rates and times the threads really wait
        self.pool = pool
        self.clock = clock
        self.gateway = Gateway(spec, clock, emit)
        self.arrival_rng = random.Random(f"{seed}:business")  # the simulator's stream
        self.query = _locked(real_spec.query.sampler(random.Random(f"{seed}:business-query")))
        self.max_concurrency = max_concurrency
        self.in_flight = 0
        self.dropped = 0
        self.record = DbRecorder()  # each request's wait and query, once a trace is attached
        self._count = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency,
                                        thread_name_prefix="loadtest-business")
        self._threads = [threading.Thread(target=self._arrivals, name="loadtest-arrivals",
                                          daemon=True),
                         threading.Thread(target=self.gateway.watch, name="loadtest-gateway",
                                          daemon=True)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop arrivals and the gateway; requests in flight end with the pool's close."""
        self._stop.set()
        self.gateway.stop()
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout=5.0)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _arrivals(self) -> None:
        """The shared Poisson clock (`poisson_times`), at the scaled rates, in real time."""
        steps = [(s.at_s, s.rate) for s in self.spec.schedule]
        for at in poisson_times(self.spec.rate, steps, self.arrival_rng, self.clock.elapsed()):
            if self._stop.wait(max(0.0, at - self.clock.elapsed())):
                return
            self._arrive()

    def _arrive(self) -> None:
        with self._count:
            if self.in_flight >= self.max_concurrency:
                self.dropped += 1
                return
        request = self.gateway.admit()
        if request is None:
            return
        with self._count:
            self.in_flight += 1
        self._pool.submit(self._serve, request)

    def _serve(self, request: _Request) -> None:
        ok = False
        clock, name, began = self.clock, self.pool.name, time.monotonic()
        try:
            conn = self.pool.acquire()
            try:
                granted = time.monotonic()
                self.record.granted(clock.now(), name, clock.scenario(granted - began), None)
                self.pool.hold(conn, self.query(), time.sleep)
                self.record.queried(clock.now(), name, clock.scenario(time.monotonic() - granted),
                                    False, None)
                ok = True
            finally:
                self.pool.release(conn)
        except PoolError:
            pass
        finally:
            self.gateway.answer(request, ok)
            with self._count:
                self.in_flight -= 1


def _locked(draw: Callable[[], float]) -> Callable[[], float]:
    lock = threading.Lock()

    def locked() -> float:
        with lock:
            return draw()

    return locked
