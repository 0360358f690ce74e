"""Guard: the three fuses around one downstream, asked in one place by every driver.

Order of questions for a call, cheapest refusal first:

1. the circuit breaker — refuse at once while it is open (resource protection);
2. the bulkhead — a permit, or join its FIFO queue (concurrency cap on this resource);
3. the client token bucket — go now, or wait `s` seconds (rate limit toward the provider).

`admit` answers one of `GO`, `Pace(wait)`, `QUEUED`, `Rejected(retry_at)`. A queued caller is
named later by `record` (or `abandon`) as the next waiter; it then calls `resume` for its
pacing. The driver only waits; the numbers come from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskfuse.core.adaptive import AdaptiveLimit
from taskfuse.core.breaker import BreakerChange, CircuitBreaker
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.events import Event, EventKind
from taskfuse.core.ratelimit import TokenBucket


class _Go:
    __slots__ = ()

    def __repr__(self) -> str:
        return "GO"


class _Queued:
    __slots__ = ()

    def __repr__(self) -> str:
        return "QUEUED"


GO = _Go()
QUEUED = _Queued()


@dataclass(frozen=True, slots=True)
class Pace:
    """Proceed after `wait` seconds: the token bucket's reservation is already taken."""

    wait: float


@dataclass(frozen=True, slots=True)
class Rejected:
    """The breaker refused the call; it may be tried again from `retry_at` (None: unknown)."""

    retry_at: float | None


Admission = _Go | _Queued | Pace | Rejected


class Guard:
    """Breaker, bulkhead, token bucket and adaptive limit of one downstream; each optional."""

    __slots__ = ("adaptive", "breaker", "bucket", "bulkhead", "emit", "name", "passthrough")

    def __init__(
        self,
        name: str,
        *,
        bulkhead: Bulkhead[Any] | None = None,
        bucket: TokenBucket | None = None,
        breaker: CircuitBreaker | None = None,
        adaptive: AdaptiveLimit | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> None:
        self.name = name
        self.bulkhead = bulkhead
        self.bucket = bucket
        self.breaker = breaker
        self.adaptive = adaptive
        self.emit = emit
        #: No fuse at all: admit always answers GO and record does nothing, so a driver may
        #: skip both (the incident's unguarded partner).
        self.passthrough = bulkhead is None and bucket is None and breaker is None
        if adaptive is not None and bulkhead is not None:
            bulkhead.set_limit(adaptive.limit)

    def breaker_listener(self, change: BreakerChange) -> None:
        """Turn a breaker's state change into an event (wire as the breaker's listener)."""
        if self.emit is not None:
            self.emit(
                Event(
                    change.at, EventKind.BREAKER, None, None, None,
                    change.src.value, change.dst.value, change.reason, None, None, self.name,
                )
            )

    def blocks(self, now: float) -> bool:
        """Whether tasks that need this downstream should stay PENDING for now."""
        return self.breaker is not None and self.breaker.blocks(now)

    def admit(self, waiter: Any, now: float) -> Admission:
        breaker = self.breaker
        if breaker is not None and not breaker.allow(now):
            return Rejected(breaker.reopen_at())
        bulkhead = self.bulkhead
        if bulkhead is not None and not bulkhead.try_acquire(waiter):
            return QUEUED
        return self.resume(now)

    def resume(self, now: float) -> _Go | Pace:
        """Pacing for a caller that holds its permit (just admitted, or handed one)."""
        bucket = self.bucket
        if bucket is None:
            return GO
        wait = bucket.reserve(now)
        return GO if wait <= 0.0 else Pace(wait)

    def abandon(self, waiter: Any, queued: bool) -> Any | None:
        """A caller gives up before its call (timeout, cancel). Returns a waiter to wake."""
        if self.breaker is not None:
            self.breaker.release_probe()
        if self.bulkhead is None:
            return None
        if queued and self.bulkhead.cancel(waiter):
            return None
        return self.bulkhead.release()

    def record(self, now: float, ok: bool, latency: float) -> list[Any]:
        """A call ended: feed the breaker and the adaptive limit, free the permit.

        Returns the waiters to wake (usually none or one; more when the limit grew).
        """
        if self.breaker is not None:
            self.breaker.record(now, ok, latency)
        woken: list[Any] = []
        bulkhead = self.bulkhead
        if bulkhead is None:
            return woken
        adaptive = self.adaptive
        if adaptive is not None:
            before = adaptive.limit
            limit = adaptive.on_sample(now, latency, ok, bulkhead.in_use)
            if limit != before:
                woken = bulkhead.set_limit(limit)
                if self.emit is not None:
                    self.emit(
                        Event(now, EventKind.LIMIT, None, None, None, None, None,
                              "adaptive", None, None, self.name, float(limit))
                    )
        nxt = bulkhead.release()
        if nxt is not None:
            woken.append(nxt)
        return woken

    @property
    def in_flight(self) -> int:
        return self.bulkhead.in_use if self.bulkhead is not None else 0
