"""A FIFO bulkhead: a counting semaphore that never waits by itself.

Theory of operation
-------------------
A bulkhead bounds how many calls touch one resource (a downstream, a DB pool, a batch) at
once, independently of how many workers the pool has: the two knobs are decoupled on purpose
(50 threads may run, but only 14 may talk to the 100-QPS partner at a time).

The core cannot block, so the answer to "may I?" is immediate:

* ``try_acquire(waiter)`` either grants a permit (``True``) or appends ``waiter`` to a FIFO
  queue (``False``). The driver then waits in its own world (a ``threading.Condition``, a
  simpy event) until somebody names it.
* ``release()`` does not put the permit back on the table for everyone to race for: it hands
  it *directly* to the oldest waiter and returns that waiter, whose permit is already counted.
  No thundering herd, no barging, and the order of service is deterministic, which the lab
  needs for "same seed, same numbers".
* ``set_limit()`` lets an adaptive limit (see ``adaptive.py``) resize the bulkhead. Raising it
  wakes queued waiters at once; lowering it never revokes a permit, the excess drains as calls
  finish (``in_use`` may sit above ``limit`` until then).

Invariant: whenever the queue is non-empty, ``in_use >= limit`` (nobody waits while a permit
is free). Not thread-safe: the threaded driver wraps it in its own lock.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["Bulkhead"]

W = TypeVar("W")


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"bulkhead limit must be an integer >= 1, got {limit!r}")
    return limit


class Bulkhead(Generic[W]):
    """FIFO permits. The driver does the waiting in its own world.

    ``try_acquire`` either grants or queues the waiter; ``release`` hands the permit directly
    to the next waiter (returned), so there is no thundering herd and order is deterministic.

    Pick a bulkhead (rather than only a worker-pool size) when several kinds of work share
    workers but must not share a resource's capacity: size it from the resource, e.g.
    ``QPS x latency x headroom`` = 100 x 0.2 s x 0.7 = 14 permits.

    A waiter is any value the driver can wake: a simpy event, a condition token, a task id.
    Waiters are compared with ``==`` by ``cancel``, so use distinct values.
    """

    __slots__ = ("_in_use", "_limit", "_queue", "max_in_use", "name")

    def __init__(self, limit: int, name: str = "") -> None:
        self._limit: int = _check_limit(limit)
        self.name: str = name
        self._in_use: int = 0
        self._queue: deque[W] = deque()
        #: The highest ``in_use`` ever seen; reports show it next to ``limit``.
        self.max_in_use: int = 0

    def __repr__(self) -> str:
        return (
            f"Bulkhead(name={self.name!r}, limit={self._limit}, in_use={self._in_use}, "
            f"waiting={len(self._queue)})"
        )

    @property
    def limit(self) -> int:
        """The current number of permits (change it with ``set_limit``)."""
        return self._limit

    @property
    def in_use(self) -> int:
        """Permits currently held, including those handed to woken waiters."""
        return self._in_use

    @property
    def waiting(self) -> int:
        """Length of the FIFO queue of waiters."""
        return len(self._queue)

    def try_acquire(self, waiter: W) -> bool:
        """Grant a permit now (``True``) or queue ``waiter`` behind the others (``False``).

        When ``False``, the driver parks ``waiter``; a later ``release()`` or ``set_limit()``
        returns it, and the permit is then already counted as its own: it must not call
        ``try_acquire`` again, only ``release()`` when done. If it gives up first, ``cancel``.
        """
        if self._in_use < self._limit and not self._queue:
            n = self._in_use + 1
            self._in_use = n
            if n > self.max_in_use:
                self.max_in_use = n
            return True
        self._queue.append(waiter)
        return False

    def try_acquire_nowait(self) -> bool:
        """Grant a permit if one is free, else ``False`` without queueing.

        For callers that would rather do something else (shed, defer the task to PENDING)
        than wait. It never overtakes queued waiters.
        """
        if self._in_use < self._limit and not self._queue:
            n = self._in_use + 1
            self._in_use = n
            if n > self.max_in_use:
                self.max_in_use = n
            return True
        return False

    def release(self) -> W | None:
        """Give back one permit; return the waiter it was handed to, or ``None``.

        The permit goes to the oldest waiter only if, without it, ``in_use`` would be below
        ``limit`` (after a lowered limit, releases first drain the excess). The returned
        waiter already owns the permit; the driver just wakes it.
        """
        n = self._in_use
        if n == 0:
            raise RuntimeError(f"release() on bulkhead {self.name!r} with no permit in use")
        if self._queue and n - 1 < self._limit:
            return self._queue.popleft()
        self._in_use = n - 1
        return None

    def cancel(self, waiter: W) -> bool:
        """Remove a queued waiter that gave up (timeout, cancel); ``True`` if it was queued.

        O(queue length): giving up is rare compared to acquire/release. A waiter that was
        already handed a permit is not queued any more: it must ``release()`` instead.
        """
        try:
            self._queue.remove(waiter)
        except ValueError:
            return False
        return True

    def set_limit(self, limit: int) -> list[W]:
        """Resize the bulkhead; return the waiters granted a permit by a raise, in FIFO order.

        Lowering never revokes a held permit: ``in_use`` may stay above ``limit`` until
        releases drain it, and meanwhile releases wake nobody.
        """
        self._limit = _check_limit(limit)
        queue = self._queue
        if not queue or self._in_use >= limit:
            return []
        woken: list[W] = []
        n = self._in_use
        while queue and n < limit:
            woken.append(queue.popleft())
            n += 1
        self._in_use = n
        if n > self.max_in_use:
            self.max_in_use = n
        return woken
