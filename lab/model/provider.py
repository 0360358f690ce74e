"""A downstream's provider side: its own rate limit, latency, errors, capacity and outages.

`request(client_timeout)` is a sub-generator a worker runs with `yield from`; it answers
`None` for a good response or the error kind (http_429, http_503, timeout, ...).

With `capacity`, requests queue FIFO for c servers (the core's Bulkhead) and latency grows
with load. A client that times out stops waiting, but the provider still serves the request
to the end: it never learns the client left. That unseen work is what keeps a retry storm
going after its cause has passed.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

import simpy

from lab.scenario import Provider as ProviderSpec
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.ratelimit import TokenBucket

HTTP_429 = "http_429"
TIMEOUT = "timeout"


class Provider:
    def __init__(
        self, env: simpy.Environment, name: str, spec: ProviderSpec,
        latency_rng: random.Random, error_rng: random.Random,
    ) -> None:
        self.env = env
        self.name = name
        self.spec = spec
        self.bucket = (
            TokenBucket(spec.rate, spec.burst or max(1.0, spec.rate / 10))
            if spec.rate is not None else None
        )
        self.latency = spec.latency.sampler(latency_rng)
        self.service = spec.capacity.service.sampler(latency_rng) if spec.capacity else None
        self.servers: Bulkhead[simpy.Event] | None = (
            Bulkhead(spec.capacity.servers, name) if spec.capacity else None
        )
        self.error_random = error_rng.random
        total = 0.0
        self.errors: list[tuple[float, str]] = []
        for kind, p in spec.errors.items():
            total += p
            self.errors.append((total, kind))
        self.error_total = total
        self.outages = [(o.start_s, o.end_s, o) for o in spec.outages]
        self.slowdowns = [(s.start_s, s.end_s, s.factor) for s in spec.slowdowns]
        self.served = 0
        self.abandoned = 0
        self.rejected = 0

    def _outage(self, now: float) -> Any:
        for start, end, outage in self.outages:
            if start <= now < end:
                return outage
        return None

    def _factor(self, now: float) -> float:
        factor = 1.0
        for start, end, f in self.slowdowns:
            if start <= now < end:
                factor *= f
        return factor

    def request(self, client_timeout: float | None) -> Generator[simpy.Event, Any, str | None]:
        env = self.env
        now = env.now
        if self.outages:
            outage = self._outage(now)
            if outage is not None:
                return (yield from self._during_outage(outage, client_timeout))
        if self.bucket is not None and not self.bucket.try_acquire(now):
            self.rejected += 1
            yield env.timeout(self.spec.reject_latency_s)
            return HTTP_429
        error = None
        if self.error_total:
            u = self.error_random()
            if u < self.error_total:
                error = next(kind for cum, kind in self.errors if u < cum)
        servers = self.servers
        if servers is not None:  # the capacity model, inlined: this is the hottest path
            job = env.event()
            if servers.try_acquire(job):
                self._start(job)
            if client_timeout is None:
                yield job
                return error
            answer = env.event()
            job.callbacks.append(lambda _: answer.triggered or answer.succeed(error))
            env.timeout(client_timeout).callbacks.append(
                lambda _: answer.triggered or answer.succeed(TIMEOUT)
            )
            result = yield answer
            if result == TIMEOUT and not job.processed:
                self.abandoned += 1
            return result  # type: ignore[no-any-return]
        latency = self.latency()
        if self.slowdowns:
            latency *= self._factor(now)
        if client_timeout is not None and latency > client_timeout:
            yield env.timeout(client_timeout)
            return TIMEOUT
        yield env.timeout(latency)
        self.served += 1
        return error

    def _during_outage(
        self, outage: Any, client_timeout: float | None
    ) -> Generator[simpy.Event, Any, str | None]:
        env = self.env
        if outage.mode == "error":
            yield env.timeout(outage.latency_s)
            return str(outage.error)
        until_end = outage.end_s - env.now
        if client_timeout is not None and client_timeout < until_end:
            yield env.timeout(client_timeout)
            return TIMEOUT
        yield env.timeout(until_end)
        return str(outage.error)

    # -- the capacity model ----------------------------------------------------------------

    def _start(self, job: simpy.Event) -> None:
        """Serve one job; when it ends, hand the server to the next queued job."""
        assert self.service is not None
        service = self.service() * (self._factor(self.env.now) if self.slowdowns else 1.0)
        done = self.env.timeout(service)
        done.callbacks.append(lambda _: self._finish(job))

    def _finish(self, job: simpy.Event) -> None:
        self.served += 1
        job.succeed()
        assert self.servers is not None
        nxt = self.servers.release()
        if nxt is not None:
            self._start(nxt)

    @property
    def queued(self) -> int:
        return self.servers.waiting if self.servers is not None else 0
