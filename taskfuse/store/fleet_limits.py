"""Fleet-wide limits: one downstream's bulkhead and QPS held across every process and machine.

Why
---
A partner allows 100 requests/s and 14 calls at once. The core's `Bulkhead` and
`TokenBucket` enforce that inside one process; a fleet of four workers each holding its own
would allow 4 x 14 calls at once. Two ways out:

* **Per process (no coordination).** Give each of N instances ``per_process_limit(limit, N)``:
  14 over 4 instances is 3 each (12 in all, 2 slots never used), 100 QPS is 25/s each. It
  costs nothing and survives a database outage, but it wastes capacity when instances are
  unevenly loaded, and it must be recomputed whenever N changes (scale-out of 4 -> 8 without
  a redeploy doubles the load on the partner). Prefer it for small fleets of fixed size, or
  as the fallback while the database is unreachable.
* **Fleet-wide (this module).** The limit lives in PostgreSQL rows every process shares:

  - `FleetBulkhead`: one row per permit; taking a permit is a lease (holder, lease id,
    expiry on the *database* clock, so machines with skewed clocks agree). A holder renews
    it during a long call; if the holder dies (kill -9, a lost machine) its lease simply
    expires and the slot is free again: a dead worker never leaks a permit. Releasing a
    permit NOTIFYs the name's channel, so waiters in other processes wake at once instead
    of polling; they also look again every ``poll_s`` for permits freed by expiry.
  - `FleetRateLimiter`: one GCRA row per name (the representation of the core's
    TokenBucket), updated in one statement per call: ``reserve()`` answers how long to wait,
    ``try_acquire()`` takes a token only if one is there. Tokens are not held, so nothing
    can leak.

  The cost is one short transaction per acquire/release (about a millisecond on a local
  database) and a dependency on the database being up: callers that must keep running
  through an outage can catch `StoreUnavailable` and fall back to a per-process share.

Fairness across processes is best effort (whoever asks first after a release wins), not FIFO.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from taskfuse.core.states import TaskfuseError
from taskfuse.store.postgres import PostgresStore, Q

__all__ = [
    "FleetBulkhead",
    "FleetRateLimiter",
    "LimitTimeout",
    "Permit",
    "per_process_limit",
]


class LimitTimeout(TaskfuseError):
    """No permit could be had within the time the caller was willing to wait."""


def per_process_limit(fleet_limit: int, instances: int) -> int:
    """The per-process share of a fleet-wide limit: floor(limit / instances), at least 1.

    Rounding down keeps the fleet at or under the limit (14 over 4 -> 3 each, 12 in all),
    except when there are more instances than permits: each still gets 1, and the fleet can
    then exceed the limit; use `FleetBulkhead` there.
    """
    if fleet_limit < 1 or instances < 1:
        raise ValueError(f"need fleet_limit >= 1 and instances >= 1, got {fleet_limit!r}, "
                         f"{instances!r}")
    return max(1, fleet_limit // instances)


def _channel(store: PostgresStore, name: str) -> str:
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"tfl_{store.schema}_{digest}"


@dataclass(frozen=True, slots=True)
class Permit:
    """A held slot of a fleet bulkhead, valid until `expires_at` (database clock) unless renewed."""

    name: str
    slot: int
    lease_id: uuid.UUID
    holder: str
    expires_at: float


class FleetBulkhead:
    """At most `limit` holders of `name` at once across every process using this database.

    ``lease_s`` is how long a permit outlives a holder that stopped renewing it: the time a
    crashed worker's slot stays blocked. Pick it above the longest call, or renew during
    long calls (`renew`). ``poll_s`` bounds how late a waiter notices a slot freed by expiry.
    """

    def __init__(
        self,
        store: PostgresStore,
        name: str,
        limit: int,
        *,
        lease_s: float = 30.0,
        poll_s: float | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"FleetBulkhead limit must be >= 1, got {limit!r}")
        if not (lease_s > 0 and math.isfinite(lease_s)):
            raise ValueError(f"lease_s must be a finite number > 0, got {lease_s!r}")
        self.store = store
        self.name = name
        self.limit = limit
        self.lease_s = float(lease_s)
        self.poll_s = poll_s if poll_s is not None else min(1.0, self.lease_s / 4)
        self.channel = _channel(store, name)
        params = {"name": name, "limit": limit}

        def setup(conn: psycopg.Connection[Any], _: bool) -> None:
            with conn.transaction():
                conn.execute(Q["slots_ensure"], params)
                conn.execute(Q["slots_shrink"], params)

        store._run(setup)

    def try_acquire(self, holder: str) -> Permit | None:
        """Take a free (or expired) permit now, or None when all `limit` are held."""
        lease_id = uuid.uuid4()
        params = {"name": self.name, "limit": self.limit, "holder": holder,
                  "lease_id": lease_id, "lease_s": self.lease_s}

        def op(conn: psycopg.Connection[Any], retried: bool) -> Permit | None:
            row = None
            if retried:  # the first attempt may have taken a slot before its reply was lost
                row = conn.execute(Q["slot_by_lease"], params).fetchone()
            if row is None:
                row = conn.execute(Q["slot_acquire"], params).fetchone()
            return None if row is None else Permit(self.name, row[0], lease_id, holder, row[1])

        return self.store._run(op)

    def acquire(self, holder: str, timeout: float) -> Permit | None:
        """Take a permit, waiting up to `timeout` s (woken by releases anywhere); None if not."""
        deadline = time.monotonic() + timeout
        listener = self.store._listener
        listener.subscribe(self.channel)
        while True:
            permit = self.try_acquire(holder)
            if permit is not None:
                return permit
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            listener.wait(self.channel, min(left, self.poll_s))

    @contextmanager
    def hold(self, holder: str, timeout: float) -> Iterator[Permit]:
        """``with bulkhead.hold("worker-3", 5.0): call()``; raises LimitTimeout if no permit."""
        permit = self.acquire(holder, timeout)
        if permit is None:
            raise LimitTimeout(
                f"no permit of {self.name!r} (limit {self.limit}) within {timeout:g}s"
            )
        try:
            yield permit
        finally:
            self.release(permit)

    def renew(self, permit: Permit) -> Permit | None:
        """Extend a held lease by `lease_s`; None if it already expired (the slot may be
        someone else's now: stop using the downstream, or acquire again)."""
        params = {"name": permit.name, "slot": permit.slot, "lease_id": permit.lease_id,
                  "lease_s": self.lease_s}
        row = self.store._run(lambda c, _: c.execute(Q["slot_renew"], params).fetchone())
        if row is None:
            return None
        return Permit(permit.name, permit.slot, permit.lease_id, permit.holder, row[0])

    def release(self, permit: Permit) -> bool:
        """Give the permit back and wake waiters; False if its lease had already lapsed."""
        params = {"name": permit.name, "slot": permit.slot, "lease_id": permit.lease_id}

        def op(conn: psycopg.Connection[Any], _: bool) -> bool:
            with conn.transaction():
                freed = conn.execute(Q["slot_release"], params).rowcount == 1
                conn.execute(Q["notify"], {"channel": self.channel})
            return freed

        return self.store._run(op)

    def in_use(self) -> int:
        """Permits held right now (unexpired leases), fleet-wide."""
        params = {"name": self.name, "limit": self.limit}
        return int(self.store._run(lambda c, _: c.execute(Q["slots_in_use"], params)
                                   .fetchone()[0]))


class FleetRateLimiter:
    """A token bucket (`rate` per second, `burst` at once) shared by the whole fleet.

    Same answers as the core's TokenBucket, on the database clock: with rate 100 and burst
    20, the 30th `reserve()` of one instant waits (30 - 20) / 100 = 0.1 s, whichever
    processes made the 29 before it. Creating a limiter with another rate or burst updates
    the shared row: the last configuration wins.
    """

    def __init__(self, store: PostgresStore, name: str, rate: float, burst: float) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a finite number > 0, got {rate!r}")
        if not (burst >= 1 and math.isfinite(burst)):
            raise ValueError(f"burst must be a finite number >= 1, got {burst!r}")
        self.store = store
        self.name = name
        self.rate = float(rate)
        self.burst = float(burst)
        params = {"name": name, "rate": self.rate, "burst": self.burst}
        store._run(lambda c, _: c.execute(Q["bucket_ensure"], params))

    def reserve(self, n: float = 1.0) -> float:
        """Take `n` tokens now, in debt if need be; answers the seconds to wait before the call."""
        params = {"name": self.name, "n": float(n)}
        row = self.store._run(lambda c, _: c.execute(Q["bucket_reserve"], params).fetchone())
        return float(row[0])

    def try_acquire(self, n: float = 1.0) -> bool:
        """Take `n` tokens only if they are there now."""
        params = {"name": self.name, "n": float(n)}
        return self.store._run(
            lambda c, _: c.execute(Q["bucket_try"], params).fetchone() is not None
        )

    def acquire(self, n: float = 1.0) -> float:
        """Reserve and sleep out the wait (the threaded runtime's way); answers the wait."""
        wait = self.reserve(n)
        if wait > 0:
            time.sleep(wait)
        return wait
