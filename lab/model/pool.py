"""A DB connection pool in virtual time: FIFO waiting with an acquire timeout.

The FIFO is the core's Bulkhead: a release hands the connection straight to the oldest
waiter (its simpy event is succeeded with True); a waiter whose acquire timeout passes first
is taken out of the queue and told False. An acquire that is granted at once
(`bulkhead.try_acquire_nowait()`) creates no simpy event at all.
"""

from __future__ import annotations

import simpy

from lab.scenario import Pool as PoolSpec
from taskfuse.core.bulkhead import Bulkhead

DB_UNAVAILABLE = "db_unavailable"
POOL_TIMEOUT = "pool_timeout"


class Pool:
    def __init__(self, env: simpy.Environment, name: str, spec: PoolSpec) -> None:
        self.env = env
        self.name = name
        self.size = spec.size
        self.acquire_timeout = spec.acquire_timeout_s
        self.outages = [(w.start_s, w.end_s) for w in spec.outages]
        self.bulkhead: Bulkhead[simpy.Event] = Bulkhead(spec.size, name)
        self.waits: list[float] = []
        self.timeouts = 0
        self.refused = 0

    def down(self, now: float) -> bool:
        """Whether the database is in an outage window (connections fail at once)."""
        return any(start <= now < end for start, end in self.outages)

    def wait_event(self, since: float) -> simpy.Event:
        """Queue for a connection; the event's value is True (granted) or False (timed out)."""
        event = self.env.event()
        self.bulkhead.try_acquire(event)
        timer = self.env.timeout(self.acquire_timeout)
        timer.callbacks.append(lambda _: self._give_up(event))
        event.callbacks.append(lambda ev: self._waited(ev, since))
        return event

    def _waited(self, event: simpy.Event, since: float) -> None:
        if event.value:
            self.waits.append(self.env.now - since)

    def _give_up(self, event: simpy.Event) -> None:
        if not event.triggered and self.bulkhead.cancel(event):
            self.timeouts += 1
            event.succeed(False)

    def release(self) -> None:
        """Give a connection back; the next waiter (if any) gets it at once."""
        nxt = self.bulkhead.release()
        if nxt is not None:
            nxt.succeed(True)

    def abandon(self, event: simpy.Event) -> None:
        """A waiter stops waiting (its worker crashed): leave the queue, or hand back a grant."""
        if not self.bulkhead.cancel(event) and event.triggered and event.value:
            self.release()

    @property
    def in_use(self) -> int:
        return self.bulkhead.in_use

    @property
    def waiting(self) -> int:
        return self.bulkhead.waiting
