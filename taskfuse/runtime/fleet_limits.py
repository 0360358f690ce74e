"""Fleet-scoped fuses of a downstream: the store's FleetBulkhead and FleetRateLimiter, driven.

Why a runtime module of its own: the store holds the limits (rows in PostgreSQL), but only the
runner knows which permits its threads hold (to renew their leases with its heartbeat) and
when a waiting attempt has been told to stop. This module is that bookkeeping; it decides no
number itself.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskfuse.runtime.errors import RuntimeConfigError

if TYPE_CHECKING:
    from taskfuse.limits.schema import ClientLimits
    from taskfuse.store.fleet_limits import FleetBulkhead, FleetRateLimiter, Permit

#: Longest single wait for a fleet permit before the waiter looks at its stop signal again.
#: Releases anywhere wake waiters at once (NOTIFY); this only bounds how late a cancel is seen.
STOP_CHECK_S = 1.0


class FleetLimits:
    """One downstream's fleet bulkhead and/or rate limiter, and the permits held here."""

    def __init__(
        self, name: str, bulkhead: FleetBulkhead | None, bucket: FleetRateLimiter | None
    ) -> None:
        self.name = name
        self.bulkhead = bulkhead
        self.bucket = bucket
        self._held: dict[uuid.UUID, Permit] = {}
        self._lock = threading.Lock()

    def try_acquire(self, holder: str) -> Permit | None:
        """A fleet permit if one is free now (one query), else None."""
        assert self.bulkhead is not None
        return self._hold(self.bulkhead.try_acquire(holder))

    def _hold(self, permit: Permit | None) -> Permit | None:
        if permit is not None:
            with self._lock:
                self._held[permit.lease_id] = permit
        return permit

    def acquire(self, holder: str, deadline: float, stopped: Callable[[], bool]) -> Permit | None:
        """A fleet permit, waiting until `deadline` (time.monotonic) or a stop; None if not.

        The wait is the store's: woken by a release in any process, so no tight polling.
        """
        assert self.bulkhead is not None
        while not stopped():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            permit = self._hold(self.bulkhead.acquire(holder, min(left, STOP_CHECK_S)))
            if permit is not None:
                return permit
        return None

    def release(self, permit: Permit) -> None:
        """Give a permit back; waiters in every process are notified by the store."""
        assert self.bulkhead is not None
        with self._lock:
            self._held.pop(permit.lease_id, None)
        self.bulkhead.release(permit)

    def reserve(self) -> float:
        """Take a token of the fleet bucket; answers the seconds to wait before the call."""
        return 0.0 if self.bucket is None else self.bucket.reserve()

    def renew_all(self) -> int:
        """Extend the lease of every permit held here (a call may outlast one lease).

        Answers how many were already lost: their slot may be someone else's now, which
        the store reports and we can only log; the call in progress is not interrupted.
        """
        assert self.bulkhead is not None
        with self._lock:
            held = list(self._held.values())
        lost = 0
        for permit in held:
            renewed = self.bulkhead.renew(permit)
            with self._lock:
                if permit.lease_id not in self._held:
                    continue  # released meanwhile
                if renewed is None:
                    lost += 1
                    del self._held[permit.lease_id]
                else:
                    self._held[permit.lease_id] = renewed
        return lost


def build_fleet(name: str, client: ClientLimits, store: Any) -> FleetLimits:
    """The fleet fuses of downstream `name` on `store`, from its client limits (scope
    fleet); a clear one-line error if the store cannot hold them."""
    from taskfuse.store.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        raise RuntimeConfigError(
            f"downstream {name!r} has scope='fleet', which needs a PostgreSQL store "
            f"(postgresql://...), not {type(store).__name__}; use scope='process' with "
            f"instances=N for a per-process share instead"
        )
    from taskfuse.store.fleet_limits import FleetBulkhead, FleetRateLimiter

    bulkhead = None
    if client.bulkhead is not None:
        bulkhead = FleetBulkhead(store, f"downstream:{name}", client.bulkhead,
                                 lease_s=client.lease_s)
    bucket = None
    if client.rate_limit is not None:
        bucket = FleetRateLimiter(store, f"downstream:{name}", client.rate_limit.rate,
                                  client.rate_limit.burst)
    return FleetLimits(name, bulkhead, bucket)
