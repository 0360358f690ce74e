"""Calls to a downstream from inside a task: the client side, in virtual time.

Each call asks the downstream's core Guard (breaker -> bulkhead -> client token bucket) and
obeys: go, sleep the pacing wait, wait for a bulkhead turn, or give up (breaker open: the
task is deferred without using an attempt). Failures are retried per the client's
RetryPolicy, sleeping while still holding whatever the task holds (its DB connection, in
the incident). Counters here feed the report and the timeline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from typing import Any

import simpy

from lab.model.provider import HTTP_429, TIMEOUT, Provider
from lab.scenario import Downstream as DownstreamSpec
from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import GO, QUEUED, Guard, Pace, Rejected
from taskfuse.core.retry import ErrorKind, RetryBudget, RetryPolicy
from taskfuse.core.task import Task


class Waiter:
    """A bulkhead queue entry; its simpy event is made only when it really has to wait."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event: simpy.Event | None = None


class CallCounters:
    """What the client side of a downstream counts; the report and the timeline read these
    names, from a simulation or from a real load test alike."""

    def __init__(self) -> None:
        self.calls = 0
        self.ok = 0
        self.r429 = 0
        self.errors = 0
        self.timeouts = 0
        self.retries = 0
        self.rejected = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.per_tenth: dict[int, int] = {}
        self.latencies: list[float] = []

    def sent(self, now: float) -> None:
        self.calls += 1
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        tenth = int(now * 10)
        self.per_tenth[tenth] = self.per_tenth.get(tenth, 0) + 1

    def received(self, error: str | None, latency: float) -> None:
        self.in_flight -= 1
        if error is None:
            self.ok += 1
            self.latencies.append(latency)
        elif error == HTTP_429:
            self.r429 += 1
        elif error == TIMEOUT:
            self.timeouts += 1
        else:
            self.errors += 1

    @property
    def peak_rps(self) -> int:
        """Most requests sent in any one (whole) second."""
        per_second: dict[int, int] = {}
        for tenth, n in list(self.per_tenth.items()):
            per_second[tenth // 10] = per_second.get(tenth // 10, 0) + n
        return max(per_second.values(), default=0)

    @property
    def peak_rps_100ms(self) -> int:
        """Most requests sent in any 100 ms, as a per-second rate: synchronized retries
        show here even when a whole second looks calm."""
        return 10 * max(list(self.per_tenth.values()), default=0)


class Downstream(CallCounters):
    """Client side of one downstream: guard, retry policy, counters."""

    def __init__(
        self, env: simpy.Environment, name: str, spec: DownstreamSpec, guard: Guard,
        provider: Provider, retry_rng: random.Random,
    ) -> None:
        self.env = env
        self.name = name
        self.spec = spec
        self.guard = guard
        self.provider = provider
        self.timeout = spec.client.timeout_s
        self.policy: RetryPolicy = spec.client.retry.build()
        budget = spec.client.retry.budget
        self.budget: RetryBudget | None = budget.build() if budget is not None else None
        self.rng = retry_rng
        #: Where a failed attempt is reported for the task's history (the trace), if anywhere.
        self.detail: Callable[[Event], None] | None = None
        self.paced = 0
        super().__init__()

    def call(self, held: list[Any], task: Task) -> Generator[simpy.Event, Any, str | None]:
        """One logical call with its retries; None on success, else the final error kind.

        `held` is the task's list of things to give back if its worker dies mid-call. The
        admission is inlined rather than a sub-generator: every level of `yield from` is paid
        again on each resume, and calls are the hottest path of a simulation.
        """
        env = self.env
        guard = self.guard
        passthrough = guard.passthrough
        retry = 0
        previous: float | None = None
        while True:
            if self.budget is not None:
                self.budget.record_attempt(env.now, retry == 0)
            waiter = None
            if not passthrough:
                waiter = Waiter()
                answer = guard.admit(waiter, env.now)
                if answer is not GO:
                    if answer is QUEUED:
                        waiter.event = env.event()
                        held.append(("queued", self, waiter))
                        yield waiter.event
                        held.pop()
                        answer = guard.resume(env.now)
                    elif isinstance(answer, Rejected):
                        self.rejected += 1
                        if self.detail is not None:
                            self._failed(task, ErrorKind.BREAKER_OPEN, retry)
                        return ErrorKind.BREAKER_OPEN
                    if isinstance(answer, Pace):
                        self.paced += 1
                        held.append(("paced", self, waiter))
                        yield env.timeout(answer.wait)
                        held.pop()
            held.append(("inflight", self, waiter))
            start = env.now
            self.sent(start)
            error = yield from self.provider.request(self.timeout)
            held.pop()
            now = env.now
            self.received(error, now - start)
            if not passthrough:
                for woken in guard.record(now, error is None, now - start):
                    woken.event.succeed()
            if error is None:
                return None
            if self.detail is not None:
                self._failed(task, error, retry)
            decision = self.policy.decide(retry, error, self.rng, previous, self.budget, now)
            if not decision.retry:
                return error
            self.retries += 1
            retry += 1
            previous = decision.delay
            if decision.delay > 0:
                yield env.timeout(decision.delay)

    def _failed(self, task: Task, error: str, retry: int) -> None:
        """A failed attempt goes into the task's history (the monitor's drill-down)."""
        self.detail(Event(self.env.now, EventKind.CALL, task.task_id, task.batch_id, None, None,
                        None, error, task.retry_count + 1, task.worker_id, self.name,
                        float(retry)))

    def abandon(self, kind: str, waiter: Waiter) -> None:
        """The task's worker died queued, pacing or mid-request: give back what it held."""
        if kind == "inflight":
            self.in_flight -= 1
        woken = self.guard.abandon(waiter, queued=kind == "queued")
        if woken is not None:
            woken.event.succeed()
