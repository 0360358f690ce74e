"""User-facing traffic that needs a connection from a (possibly shared) DB pool.

Requests arrive as a Poisson stream (its rate may change on a schedule), each runs one query
on the pool, and a gateway in front gives up after `gateway_timeout_s`. The backend does not
learn that the gateway gave up: the request keeps its place in the pool's queue until it gets
a connection or the pool's own acquire timeout, exactly as a real thread would. The gateway
has its own circuit breaker (the core's class): when requests keep failing it opens and
refuses traffic at once — the "module fused by the gateway" of the incident.

Requests are callbacks, not processes: a request that finds a free connection costs one simpy
event (its query), one that waits costs three.
"""

from __future__ import annotations

import random

import simpy

from lab.model.arrivals import poisson_times
from lab.model.pool import Pool
from lab.scenario import Business as BusinessSpec
from taskfuse.core.breaker import CircuitBreaker


class GatewayCounters:
    """What the gateway saw, as the report and the timeline read it, from a simulation or a
    real load test alike: each request's latency (a timeout counts as the timeout) and when
    it was observed, plus counts; every outcome also feeds the gateway's breaker."""

    def __init__(self, breaker: CircuitBreaker | None) -> None:
        self.breaker = breaker
        self.latencies: list[float] = []
        self.times: list[float] = []
        self.requests = 0
        self.timeouts = 0
        self.errors = 0
        self.rejected = 0

    def observe(self, now: float, latency: float, ok: bool) -> None:
        self.latencies.append(latency)
        self.times.append(now)
        if not ok:
            self.errors += 1
        if self.breaker is not None:
            self.breaker.record(now, ok, latency)


class BusinessTraffic(GatewayCounters):
    def __init__(
        self, env: simpy.Environment, spec: BusinessSpec, pool: Pool,
        arrival_rng: random.Random, query_rng: random.Random,
        breaker: CircuitBreaker | None,
    ) -> None:
        self.env = env
        self.spec = spec
        self.pool = pool
        self.query = spec.query.sampler(query_rng)
        self.timeout = spec.gateway_timeout_s
        self.arrival_rng = arrival_rng
        self.stopped = False
        super().__init__(breaker)

    def run(self):  # type: ignore[no-untyped-def]
        """The arrival process: the shared Poisson clock (`poisson_times`), in virtual time."""
        env = self.env
        steps = [(s.at_s, s.rate) for s in self.spec.schedule]
        for at in poisson_times(self.spec.rate, steps, self.arrival_rng, env.now):
            if self.stopped:
                return
            yield env.timeout(at - env.now)
            if not self.stopped:
                self.arrive()

    def arrive(self) -> None:
        env = self.env
        now = env.now
        breaker = self.breaker
        if breaker is not None and not breaker.allow(now):
            self.rejected += 1
            return
        self.requests += 1
        pool = self.pool
        if pool.outages and pool.down(now):
            self._observe(now, 0.0, ok=False)
            return
        query = self.query()
        if pool.bulkhead.try_acquire_nowait():
            pool.waits.append(0.0)
            env.timeout(query).callbacks.append(lambda _: self._done(now))
            return
        request = {"answered": False}
        waiter = pool.wait_event(now)
        waiter.callbacks.append(lambda ev: self._granted(ev, now, query, request))
        env.timeout(self.timeout).callbacks.append(lambda _: self._gateway_gives_up(now, request))

    def _granted(self, ev: simpy.Event, start: float, query: float, request: dict) -> None:
        if not ev.value:  # the pool's acquire timeout: an error response
            self._answer(start, request, ok=False)
            return
        self.env.timeout(query).callbacks.append(lambda _: self._done(start, request))

    def _done(self, start: float, request: dict | None = None) -> None:
        self.pool.release()
        if request is None:
            self._observe(start, self.env.now - start, ok=True)
        else:
            self._answer(start, request, ok=True)

    def _answer(self, start: float, request: dict, ok: bool) -> None:
        if request["answered"]:
            return  # the gateway already gave up on it
        request["answered"] = True
        self._observe(start, self.env.now - start, ok=ok)

    def _gateway_gives_up(self, start: float, request: dict) -> None:
        if request["answered"]:
            return
        request["answered"] = True
        self.timeouts += 1
        self._observe(start, self.timeout, ok=False)

    def _observe(self, start: float, latency: float, ok: bool) -> None:
        self.observe(self.env.now, latency, ok)
