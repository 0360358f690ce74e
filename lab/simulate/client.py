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
from taskfuse.core.retry import ErrorKind, RetryPolicy, RetryThrottle
from taskfuse.core.task import Task
from taskfuse.limits.build import call_retry


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
        provider: Provider, retry_rng: random.Random, track: bool = True,
    ) -> None:
        self.env = env
        self.name = name
        self.spec = spec
        self.guard = guard
        self.provider = provider
        self.timeout = spec.client.timeout_s
        self.policy: RetryPolicy
        self.budget: RetryThrottle | None
        self.policy, self.budget = call_retry(spec.client)
        self.rng = retry_rng
        #: Where a failed attempt is reported for the task's history (the trace), if anywhere.
        self.detail: Callable[[Event], None] | None = None
        self.paced = 0
        #: Whether a call notes in the task's `held` what it holds: only a crash needs it.
        self.track = track
        super().__init__()

    def call(self, held: list[Any], task: Task) -> Generator[simpy.Event, Any, str | None]:
        """One logical call with its retries; None on success, else the final error kind.

        `held` is the task's list of things to give back if its worker dies mid-call (kept
        only when `track`: without a crash fault nothing can interrupt a call). The
        admission is inlined rather than a sub-generator: every level of `yield from` is paid
        again on each resume, and calls are the hottest path of a simulation.
        """
        env = self.env
        guard = self.guard
        passthrough = guard.passthrough
        track = self.track
        retry = 0
        previous: float | None = None
        while True:
            if self.budget is not None and retry == 0:
                self.budget.record_first(env.now)  # retries are charged when decided
            waiter = None
            if not passthrough:
                waiter = Waiter()
                answer = guard.admit(waiter, env.now)
                if answer is not GO:
                    if answer is QUEUED:
                        waiter.event = env.event()
                        if track:
                            held.append(("queued", self, waiter))
                        yield waiter.event
                        if track:
                            held.pop()
                        answer = guard.resume(env.now)
                    elif isinstance(answer, Rejected):
                        self.rejected += 1  # never sent: no CALL event (as in the runtime)
                        return ErrorKind.BREAKER_OPEN
                    if isinstance(answer, Pace):
                        self.paced += 1
                        if track:
                            held.append(("paced", self, waiter))
                        yield env.timeout(answer.wait)
                        if track:
                            held.pop()
            if track:
                held.append(("inflight", self, waiter))
            start = env.now
            self.sent(start)
            error = yield from self.provider.request(self.timeout)
            if track:
                held.pop()
            now = env.now
            latency = now - start
            self.received(error, latency)
            if not passthrough:
                for woken in guard.record(now, error is None, latency):
                    woken.event.succeed()
            if self.budget is not None:
                self.budget.record_outcome(now, error is None)
            if self.detail is not None:
                self._called(task, error, latency)
            if error is None:
                return None
            decision = self.policy.decide(retry, error, self.rng, previous, self.budget, now)
            if not decision.retry:
                return error
            self.retries += 1
            retry += 1
            previous = decision.delay
            if decision.delay > 0:
                yield env.timeout(decision.delay)

    def _called(self, task: Task, error: str | None, latency: float) -> None:
        """Every call that was sent goes into the task's history, as the runtime records it:
        reason "ok" or the error kind, value the latency in seconds."""
        self.detail(Event(self.env.now, EventKind.CALL, task.task_id, task.batch_id,  # type: ignore[misc]
                          task.trace_id, None, None, error or "ok", task.retry_count + 1, None,
                          self.name, latency))

    def abandon(self, kind: str, waiter: Waiter) -> None:
        """The task's worker died queued, pacing or mid-request: give back what it held."""
        if kind == "inflight":
            self.in_flight -= 1
        woken = self.guard.abandon(waiter, queued=kind == "queued")
        if woken is not None:
            woken.event.succeed()
