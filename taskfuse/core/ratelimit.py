"""A token bucket that answers "granted" or "wait s" and never waits itself.

Theory of operation
-------------------
A token bucket protects the *other* side of a call: a partner that allows 100 requests/s with
short bursts of 20 gets ``TokenBucket(rate=100, burst=20)``. Tokens drip in at ``rate`` per
second up to ``burst``; a call takes one (or ``n``). Over any window of ``T`` seconds at most
``burst + rate*T`` tokens are handed out: with the numbers above, at most 20 + 100 x 0.5 = 70
calls start in any half second, and the long-run rate is 100/s however the calls arrive.

The core cannot block, so there are two questions a driver can ask:

* ``try_acquire(now)``: take the tokens if they are there, else take nothing (shed the call,
  or ask ``next_free(now)`` when to come back).
* ``reserve(now)``: always take the tokens, going into debt if needed, and answer how long the
  caller must wait before it may proceed (Guava's ``RateLimiter.reserve``). Reservations queue
  FIFO: in a full bucket the k-th reserve at the same instant waits ``(k - burst) / rate``, so
  with rate 100 and burst 20 the 30th caller waits (30 - 20) / 100 = 0.1 s. A driver only
  schedules a timer when the answer is above zero.

Representation (GCRA)
---------------------
Instead of a token count plus a "last refill" time, the bucket stores one time, ``_empty``:
the instant at which the count, refilled without a cap, would have been zero. Then

    tokens(now) = min(burst, (now - _empty) * rate)

A request for ``n`` is granted now iff ``_empty + n/rate <= now`` (or the bucket is full and
``n <= burst``), and granting moves ``_empty`` forward by ``n/rate``. This makes the answers
exactly consistent with each other in floating point: ``next_free(now)`` returns the very
float ``_empty + 1/rate`` that ``try_acquire`` compares against, so a driver that comes back
at ``next_free`` is granted, instead of spinning on a 1e-17 shortfall.

Time must not go backwards; if it does (two clocks, a rounding), an earlier ``now`` is taken
as the latest one seen, so tokens are never refilled negatively nor handed out twice.
Not thread-safe: the threaded driver wraps it in its own lock.
"""

from __future__ import annotations

import math

__all__ = ["TokenBucket"]


def _check_rate(rate: float) -> float:
    # `not (x > 0)` also rejects NaN; infinity would make 1/rate zero and every wait 0 * inf.
    if not (rate > 0.0 and math.isfinite(rate)):
        raise ValueError(f"TokenBucket rate must be a finite number > 0 tokens/s, got {rate!r}")
    return float(rate)


class TokenBucket:
    """``rate`` tokens/s, ``burst`` = capacity; starts full at time ``start`` (default 0.0).

    Pick ``rate`` from the partner's published limit with some headroom, and ``burst`` from
    how much it tolerates at once: ``burst=1`` spaces calls evenly (one every ``1/rate`` s),
    a larger burst lets an idle client catch up in a short spike.

    Example (rate 10/s, burst 2): at t=0 two ``try_acquire`` calls are granted and a third is
    refused; ``next_free(0)`` is 0.1; ``reserve(0)`` then answers 0.1 s and a second
    ``reserve(0)`` 0.2 s (FIFO, one ``1/rate`` apart).
    """

    __slots__ = ("_burst", "_burst_t", "_empty", "_inv", "_last", "_rate")

    def __init__(self, rate: float, burst: float, start: float = 0.0) -> None:
        self._rate: float = _check_rate(rate)
        if not (burst >= 1.0 and math.isfinite(burst)):
            raise ValueError(f"TokenBucket burst must be a finite number >= 1, got {burst!r}")
        self._burst: float = float(burst)
        self._inv: float = 1.0 / self._rate
        self._burst_t: float = self._burst * self._inv  # seconds to refill from 0 to burst
        start = float(start)
        self._last: float = start
        self._empty: float = start - self._burst_t  # full at `start`

    @property
    def rate(self) -> float:
        """Tokens added per second."""
        return self._rate

    @property
    def burst(self) -> float:
        """Capacity: the most tokens the bucket holds, i.e. the largest instant burst."""
        return self._burst

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self._rate!r}, burst={self._burst!r})"

    def try_acquire(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens if they are available at ``now``; otherwise take nothing.

        Refused while reservations are outstanding (the bucket is in debt), so a caller using
        ``try_acquire`` never jumps the ``reserve`` queue. A request for more than ``burst``
        tokens is never granted (use ``reserve`` for that).
        """
        if now >= self._last:
            self._last = now
        else:  # time went backwards (or NaN): use the latest time seen
            now = self._last
        if not n >= 0.0:
            raise ValueError(f"TokenBucket.try_acquire n must be >= 0, got {n!r}")
        empty = self._empty
        if empty > now - self._burst_t:  # not full
            new = empty + n * self._inv
            if new > now:
                return False
        else:  # full: the cap applies, the count is exactly burst
            if n > self._burst:
                return False
            new = now - (self._burst - n) * self._inv
        self._empty = new
        return True

    def reserve(self, now: float, n: float = 1.0) -> float:
        """Take ``n`` tokens unconditionally and answer how many seconds to wait before use.

        Answers 0.0 exactly when ``try_acquire(now, n)`` would have been granted. Otherwise
        the bucket goes into debt and the wait is the time until the debt is repaid:
        ``wait = (n - tokens(now)) / rate``. Successive reservations queue FIFO, each
        ``n/rate`` after the previous one: rate 100, burst 20, all at t=0, the 21st waits
        0.01 s and the 30th (30 - 20) / 100 = 0.1 s. Debt is not capped, so a driver that
        reserves for a flood of calls hands out long waits rather than bursting; use
        ``try_acquire`` to shed load instead.
        """
        if now >= self._last:
            self._last = now
        else:
            now = self._last
        if not n >= 0.0:
            raise ValueError(f"TokenBucket.reserve n must be >= 0, got {n!r}")
        empty = self._empty
        if empty > now - self._burst_t:  # not full
            new = empty + n * self._inv
        else:
            new = now - (self._burst - n) * self._inv
        self._empty = new
        return new - now if new > now else 0.0

    def tokens(self, now: float) -> float:
        """Tokens available at ``now``, for display; negative while reservations are pending.

        ``tokens(now) = min(burst, (now - empty) * rate)``: rate 10, burst 2, two
        ``reserve(0)`` calls beyond the full bucket leave ``tokens(0) == -2.0`` and
        ``tokens(0.25) == 0.5``. Does not change the bucket.
        """
        if not now >= self._last:  # earlier (or NaN): the latest time seen
            now = self._last
        empty = self._empty
        if empty <= now - self._burst_t:
            return self._burst
        return (now - empty) * self._rate

    def next_free(self, now: float) -> float:
        """Absolute time at which one token is available (``now`` itself if one is already).

        ``next_free = empty + 1/rate`` when that is later than ``now``: rate 10, burst 1,
        after a grant at t=3.0 the next token is free at 3.1. ``try_acquire`` at exactly the
        returned time is granted (same float comparison), so a driver loop always progresses.
        Does not change the bucket.
        """
        if not now >= self._last:  # earlier (or NaN): the latest time seen
            now = self._last
        t = self._empty + self._inv
        return t if t > now else now

    def set_rate(self, rate: float, now: float) -> None:
        """Change the rate at ``now``, keeping the tokens accrued so far.

        Tokens in hand are kept as a count: 4 tokens at 10/s stay 4 tokens at 100/s, and the
        next one arrives 0.01 s later instead of 0.1 s. A debt is kept as a time instead, like
        Guava's ``setRate`` ("currently throttled requests are not affected"): reservations
        already answered keep their start times and the new rate applies to what comes after.
        """
        rate = _check_rate(rate)
        if now >= self._last:
            self._last = now
        else:
            now = self._last
        have = self.tokens(now)
        self._rate = rate
        self._inv = 1.0 / rate
        self._burst_t = self._burst * self._inv
        if have >= 0.0:
            self._empty = now - have * self._inv if have < self._burst else now - self._burst_t
        # else: in debt, `_empty` (the instant the debt is repaid) stays where it is.
