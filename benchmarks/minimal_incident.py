"""A minimal hand-written simpy model of the incident: the baseline the lab is held to.

No scheduler core, no store, no guards, no trace, no timeline: workers pop task indexes from
a list, a deque is the pool's FIFO, a token bucket is three floats. It draws its random
numbers from the same named streams, in the same order, as the lab (`random.Random` seeded
with "SEED:CONCERN"), so on the same parameters the two runs agree exactly; any difference
in the numbers is a bug in one of them, any difference in wall time is the lab's overhead.

It models what incident.yaml uses: one pool shared with business traffic, held for the whole
task; a provider with a token bucket, c servers with a FIFO queue and a slowdown window; a
client timeout and fixed-delay retries; the gateway without its breaker.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from lab.scenario import CallStep, DbStep, Scenario, WorkStep


@dataclass
class MinimalResult:
    makespan_s: float
    ok_calls: int = 0
    r429: int = 0
    timeouts: int = 0
    calls: int = 0
    finished: list[float] = field(default_factory=list)
    business_latencies: list[float] = field(default_factory=list)
    business_timeouts: int = 0
    pool_waits: list[float] = field(default_factory=list)
    events: int = 0
    wall_s: float = 0.0


class MinimalIncident:
    def __init__(self, sc: Scenario, seed: int | None = None) -> None:
        self.sc = sc
        seed = sc.seed if seed is None else seed
        self.seed = seed
        self.env = simpy.Environment()
        batch = sc.batches[0]
        db, call, work = (_find(batch.program, t) for t in (DbStep, CallStep, WorkStep))
        self.n_tasks = batch.count
        self.query = db.db.query.sampler(self._rng("program:0:0"))
        self.count = call.call.count.sampler(self._rng("program:0:1"))
        self.work = work.work.sampler(self._rng("program:0:2"))
        ds = sc.downstreams[call.call.downstream]
        prov = ds.provider
        assert prov.capacity is not None and prov.rate is not None
        self.service = prov.capacity.service.sampler(self._rng(f"latency:{call.call.downstream}"))
        self.servers_free = prov.capacity.servers
        self.server_queue: deque[simpy.Event] = deque()
        self.rate = prov.rate
        self.burst = prov.burst or max(1.0, prov.rate / 10)
        self.inv = 1.0 / self.rate
        self.burst_t = self.burst * self.inv
        self.empty_at = -self.burst_t  # token bucket as one float: when it would be empty
        self.reject_latency = prov.reject_latency_s
        self.slowdowns = [(s.start_s, s.end_s, s.factor) for s in prov.slowdowns]
        self.client_timeout = ds.client.timeout_s
        self.max_retry = ds.client.retry.max_retry
        self.retry_delay = ds.client.retry.backoff.base
        pool = sc.pools[db.db.pool]
        self.pool_free = pool.size
        self.pool_queue: deque[simpy.Event] = deque()
        self.acquire_timeout = pool.acquire_timeout_s
        biz = sc.business
        assert biz is not None
        self.biz_rate = biz.rate
        self.biz_expo = self._rng("business").expovariate
        self.biz_query = biz.query.sampler(self._rng("business-query"))
        self.gateway_timeout = biz.gateway_timeout_s
        self.next_task = 0
        self.done = 0
        self.finished = self.env.event()
        self.result = MinimalResult(0.0)

    def _rng(self, concern: str) -> random.Random:
        return random.Random(f"{self.seed}:{concern}")

    # -- pool ------------------------------------------------------------------------------

    def acquire_or_wait(self) -> simpy.Event | None:
        if self.pool_free and not self.pool_queue:
            self.pool_free -= 1
            self.result.pool_waits.append(0.0)
            return None
        ev = self.env.event()
        self.pool_queue.append(ev)
        since = self.env.now
        self.env.timeout(self.acquire_timeout).callbacks.append(lambda _: self._give_up(ev))
        ev.callbacks.append(lambda e: e.value and self.result.pool_waits.append(
            self.env.now - since))
        return ev

    def _give_up(self, ev: simpy.Event) -> None:
        if not ev.triggered and ev in self.pool_queue:
            self.pool_queue.remove(ev)
            ev.succeed(False)

    def release(self) -> None:
        if self.pool_queue:
            self.pool_queue.popleft().succeed(True)
        else:
            self.pool_free += 1

    # -- provider --------------------------------------------------------------------------

    def bucket_take(self, now: float) -> bool:
        empty = self.empty_at
        if empty > now - self.burst_t:  # not full
            new = empty + self.inv
            if new > now:
                return False
        else:
            new = now - (self.burst - 1.0) * self.inv
        self.empty_at = new
        return True

    def factor(self, now: float) -> float:
        f = 1.0
        for start, end, k in self.slowdowns:
            if start <= now < end:
                f *= k
        return f

    def start_job(self, job: simpy.Event) -> None:
        service = self.service() * (self.factor(self.env.now) if self.slowdowns else 1.0)
        self.env.timeout(service).callbacks.append(lambda _: self.finish_job(job))

    def finish_job(self, job: simpy.Event) -> None:
        job.succeed()
        if self.server_queue:
            self.start_job(self.server_queue.popleft())
        else:
            self.servers_free += 1

    def request(self) -> Generator[simpy.Event, Any, str | None]:
        env = self.env
        if not self.bucket_take(env.now):
            yield env.timeout(self.reject_latency)
            return "http_429"
        job = env.event()
        if self.servers_free and not self.server_queue:
            self.servers_free -= 1
            self.start_job(job)
        else:
            self.server_queue.append(job)
        answer = env.event()
        job.callbacks.append(lambda _: answer.triggered or answer.succeed(None))
        env.timeout(self.client_timeout).callbacks.append(
            lambda _: answer.triggered or answer.succeed("timeout"))
        return (yield answer)  # type: ignore[no-any-return]

    def call(self) -> Generator[simpy.Event, Any, str | None]:
        retry = 0
        r = self.result
        while True:
            r.calls += 1
            error = yield from self.request()
            if error is None:
                r.ok_calls += 1
                return None
            if error == "http_429":
                r.r429 += 1
            else:
                r.timeouts += 1
            if retry >= self.max_retry:
                return error
            retry += 1
            yield self.env.timeout(self.retry_delay)

    # -- workers and business --------------------------------------------------------------

    def worker(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while self.next_task < self.n_tasks:
            self.next_task += 1
            wait = self.acquire_or_wait()
            if wait is not None and not (yield wait):
                self._task_done()
                continue
            yield env.timeout(self.query())
            for _ in range(int(self.count() + 0.5)):
                if (yield from self.call()) is not None:
                    break
            else:
                yield env.timeout(self.work())
            self.release()
            self._task_done()

    def _task_done(self) -> None:
        self.done += 1
        self.result.finished.append(self.env.now)
        if self.done == self.n_tasks:
            self.finished.succeed()

    def business(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            yield env.timeout(self.biz_expo(self.biz_rate))
            self.arrive()

    def arrive(self) -> None:
        env = self.env
        start = env.now
        query = self.biz_query()
        wait = self.acquire_or_wait()
        if wait is None:
            env.timeout(query).callbacks.append(lambda _: self._biz_done(start, None))
            return
        state = {"answered": False}
        wait.callbacks.append(lambda ev: self._biz_granted(ev, start, query, state))
        env.timeout(self.gateway_timeout).callbacks.append(lambda _: self._biz_gives_up(state))

    def _biz_granted(self, ev: simpy.Event, start: float, query: float, state: dict) -> None:
        if not ev.value:
            self._biz_answer(start, state)
            return
        self.env.timeout(query).callbacks.append(lambda _: self._biz_done(start, state))

    def _biz_done(self, start: float, state: dict | None) -> None:
        self.release()
        if state is None:
            self.result.business_latencies.append(self.env.now - start)
        else:
            self._biz_answer(start, state)

    def _biz_answer(self, start: float, state: dict) -> None:
        if not state["answered"]:
            state["answered"] = True
            self.result.business_latencies.append(self.env.now - start)

    def _biz_gives_up(self, state: dict) -> None:
        if not state["answered"]:
            state["answered"] = True
            self.result.business_timeouts += 1
            self.result.business_latencies.append(self.gateway_timeout)

    def run(self) -> MinimalResult:
        started = time.perf_counter()
        env = self.env
        for _ in range(self.sc.workers if isinstance(self.sc.workers, int) else 1):
            env.process(self.worker())
        env.process(self.business())
        env.run(until=self.finished)
        self.result.makespan_s = env.now
        self.result.events = next(env._eid)  # type: ignore[attr-defined]
        self.result.wall_s = time.perf_counter() - started
        return self.result


def _find(program: list[Any], kind: type) -> Any:
    return next(step for step in program if isinstance(step, kind))
