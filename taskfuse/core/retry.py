"""Retry policy: which failures are worth another attempt, when, and how many in total.

Theory of operation
-------------------
A failure is not a verdict. A task that fails with a *transient* error (a timeout, a reset
connection, 429 Too Many Requests, 503) goes back to PENDING with ``retry_count + 1`` and
``not_before = now + delay``; a task that fails with a *permanent* error (bad parameters, a
business-rule violation, 401) is FAILED at once, because asking again can only give the same
answer and adds load. ``RetryPolicy.decide`` makes that call and returns a small immutable
``RetryDecision``; the scheduler applies it, the driver only waits.

Three separate brakes keep retries from turning an outage into a retry storm:

* ``max_retry`` bounds the attempts of one task (``attempts = max_retry + 1``);
* ``Backoff`` spreads the retries out in time, with jitter so that 3,000 tasks failing in the
  same second do not all come back in the same later second;
* ``RetryBudget`` bounds the retries of the whole system to a fraction of its first attempts
  (Finagle's and gRPC's retry budget): at most +10 % load, whatever each task's own policy.

Everything is pure: time is the ``now`` argument and randomness an injected ``random.Random``
(one stream per concern, so the lab's "same seed, same numbers" holds). Backoff draws from the
stream only when a jittered delay is actually computed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "FATAL_DEFAULT",
    "RETRYABLE_DEFAULT",
    "Backoff",
    "BackoffKind",
    "ErrorKind",
    "Jitter",
    "RetryBudget",
    "RetryDecision",
    "RetryPolicy",
    "RetryThrottle",
    "RetryTokens",
]


class ErrorKind(StrEnum):
    """Standard error classes. Any other string is a valid (user-declared) kind too."""

    TIMEOUT = "timeout"
    CONNECTION_RESET = "connection_reset"
    HTTP_429 = "http_429"
    HTTP_503 = "http_503"
    BAD_PARAMS = "bad_params"
    BUSINESS_RULE = "business_rule"
    HTTP_401 = "http_401"
    BREAKER_OPEN = "breaker_open"  # the client's own breaker refused the call
    UPSTREAM_FAILED = "upstream_failed"  # a DAG dependency ended badly
    CANCELED = "canceled"
    ORPHANED = "orphaned"  # worker crashed or task hung (sweeper)


RETRYABLE_DEFAULT: frozenset[str] = frozenset(
    {ErrorKind.TIMEOUT, ErrorKind.CONNECTION_RESET, ErrorKind.HTTP_429, ErrorKind.HTTP_503}
)
"""Transient: the same request may well succeed a little later."""

FATAL_DEFAULT: frozenset[str] = frozenset(
    {ErrorKind.BAD_PARAMS, ErrorKind.BUSINESS_RULE, ErrorKind.HTTP_401}
)
"""Permanent: the same request will get the same answer; retrying only adds load."""


class Jitter(StrEnum):
    """How a backoff delay is randomized below its ceiling ``c`` (see ``Backoff.delay``)."""

    NONE = "none"
    FULL = "full"
    EQUAL = "equal"
    DECORRELATED = "decorrelated"


class BackoffKind(StrEnum):
    """How the un-jittered ceiling grows with the retry number (see ``Backoff.ceiling``)."""

    NONE = "none"
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


def _finite_at_least(owner: str, name: str, value: float, low: float) -> None:
    # `not (x >= low)` also rejects NaN.
    if not (value >= low and math.isfinite(value)):
        raise ValueError(f"{owner}.{name} must be a finite number >= {low!r} (got {value!r})")


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before retry ``k`` (``k >= 1``): a ceiling, then jitter below it.

    Ceiling ``c(k)``:

    * ``none``: 0. Retry at once; only for work whose failures are not load-related.
    * ``fixed``: ``base``. Simple and predictable; fine for a handful of clients.
    * ``exponential``: ``min(cap, base * multiplier**(k-1))``. The default: each failure
      doubles the pause so a struggling downstream gets room to recover. With base 0.1 s,
      multiplier 2, cap 30 s: 0.1, 0.2, 0.4, ... retry 9 is 25.6 s, retry 10 is
      min(30, 51.2) = 30 s, and so is retry 1000 (no OverflowError).

    Jitter (the delay actually used), after AWS's "Exponential Backoff and Jitter":

    * ``none``: ``c``. Deterministic; for tests and for a single client.
    * ``full``: ``uniform(0, c)``, mean ``c/2``. The default: the least total work and the
      widest spread when many tasks fail together. Retry 3 above: uniform(0, 0.4), mean 0.2 s.
    * ``equal``: ``c/2 + uniform(0, c/2)``, mean ``3c/4``. Never retries sooner than half the
      ceiling, at the price of a narrower spread. Retry 3: 0.2 + uniform(0, 0.2), mean 0.3 s.
    * ``decorrelated``: ``min(cap, uniform(base, 3*previous))``, ``previous`` being the last
      delay (``base`` for the first retry). Grows from the previous sleep rather than from the
      retry number (``k`` and ``multiplier`` are not used); always within ``[base, cap]``.
      After a 0.4 s sleep: min(30, uniform(0.1, 1.2)), mean 0.65 s.

    ``kind=none`` always answers 0.0, whatever the jitter, and draws nothing from the rng.
    """

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    base: float = 0.1
    cap: float = 30.0
    multiplier: float = 2.0
    jitter: Jitter = Jitter.FULL

    def __post_init__(self) -> None:
        # Coerce plain strings (from YAML) to the enums; an unknown name is a ValueError.
        object.__setattr__(self, "kind", BackoffKind(self.kind))
        object.__setattr__(self, "jitter", Jitter(self.jitter))
        _finite_at_least("Backoff", "base", self.base, 0.0)
        _finite_at_least("Backoff", "multiplier", self.multiplier, 1.0)
        if not (self.cap >= self.base and math.isfinite(self.cap)):
            raise ValueError(
                f"Backoff.cap must be >= base (got cap={self.cap!r}, base={self.base!r})"
            )

    def ceiling(self, retry_number: int) -> float:
        """The un-jittered delay before retry ``retry_number`` (1 = the first retry).

        ``none`` -> 0, ``fixed`` -> base, ``exponential`` -> min(cap, base*multiplier**(k-1)),
        e.g. base 0.1, multiplier 2, cap 30: k=4 -> 0.8 s, k=12 -> 30 s.
        """
        if retry_number < 1:
            raise ValueError(f"Backoff retry_number must be >= 1, got {retry_number!r}")
        kind = self.kind
        if kind is BackoffKind.EXPONENTIAL:
            try:
                # float ** raises OverflowError past ~1e308 (an int ** would build a huge int).
                value = self.base * float(self.multiplier) ** (retry_number - 1)
            except OverflowError:
                return self.cap if self.base > 0.0 else 0.0
            return value if value < self.cap else self.cap
        if kind is BackoffKind.FIXED:
            return self.base
        return 0.0

    def delay(self, retry_number: int, rng: random.Random, previous: float | None = None) -> float:
        """The jittered delay in seconds before retry ``retry_number``, drawn from ``rng``.

        ``previous`` is the delay used before the previous retry; only ``decorrelated`` jitter
        reads it (default ``base``; values below ``base`` are taken as ``base`` so the result
        stays in ``[base, cap]``). At most one draw from ``rng`` per call, none for
        ``kind=none`` or ``jitter=none``: the same seed gives the same sequence.
        """
        if self.kind is BackoffKind.NONE:
            return 0.0
        jitter = self.jitter
        if jitter is Jitter.DECORRELATED:
            base = self.base
            prev = base if previous is None or previous < base else previous
            # uniform(base, 3*prev) == base + (3*prev - base) * random(), as random.uniform.
            value = base + (3.0 * prev - base) * rng.random()
            return value if value < self.cap else self.cap
        c = self.ceiling(retry_number)
        if jitter is Jitter.FULL:
            return c * rng.random()  # uniform(0, c)
        if jitter is Jitter.EQUAL:
            half = 0.5 * c
            return half + half * rng.random()  # c/2 + uniform(0, c/2)
        return c


class RetryDecision:
    """The answer of ``RetryPolicy.decide``: retry after ``delay`` seconds, or stop.

    ``reason`` is for people (events, logs, the monitor), e.g.
    ``"retryable 'http_503', retry 2 of 3 in 0.412s"`` or ``"not retryable: 'http_401'"``.
    A retry's reason is formatted when first read: a simulation decides a retry for every
    failed call and reads none of their reasons, and formatting one cost as much as the
    decision. A value: equal when retry, delay and reason are.
    """

    __slots__ = ("_reason", "delay", "retry")

    def __init__(self, retry: bool, delay: float, reason: str) -> None:
        self.retry = retry
        self.delay = delay
        self._reason: str | tuple[str, int, int] = reason

    @classmethod
    def retrying(cls, delay: float, error_kind: str, number: int, max_retry: int
                 ) -> RetryDecision:
        """Retry number `number` of `max_retry` after `delay`, its reason formatted on read."""
        decision = cls.__new__(cls)
        decision.retry = True
        decision.delay = delay
        decision._reason = (error_kind, number, max_retry)
        return decision

    @property
    def reason(self) -> str:
        reason = self._reason
        if isinstance(reason, tuple):
            kind, number, max_retry = reason
            reason = self._reason = (
                f"retryable {str(kind)!r}, retry {number} of {max_retry} in {self.delay:.3f}s")
        return reason

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RetryDecision):
            return NotImplemented
        return (self.retry, self.delay, self.reason) == (other.retry, other.delay, other.reason)

    def __hash__(self) -> int:
        return hash((self.retry, self.delay, self.reason))

    def __repr__(self) -> str:
        return f"RetryDecision(retry={self.retry!r}, delay={self.delay!r}, reason={self.reason!r})"


_BUDGET_EXHAUSTED = RetryDecision(False, 0.0, "retry budget exhausted")
_TIMEOUTS_NOT_RETRIED = RetryDecision(False, 0.0, "not retryable: timeouts (retry_timeouts=False)")


class RetryBudget:
    """Retries may be at most ``ratio`` of the first attempts seen in the last ``window_s``
    seconds, plus ``min_per_s * window_s`` so that a quiet system can still retry.

    Why: per-task limits do not bound the *system*. With ``max_retry=3`` an outage can
    quadruple the load on a downstream that is already failing; a budget caps the extra load
    at ``ratio`` (Finagle's and gRPC's retry budget). With ratio 0.1, window 10 s, min 1/s:
    after 1,000 first attempts in the window, 0.1 x 1000 + 1 x 10 = 110 retries are allowed;
    the 111th is refused until old attempts leave the window.

    Sans-IO: counts are kept in 10 time buckets of ``window_s/10`` seconds (an attempt at
    time t falls in bucket ``floor(t / (window_s/10))``); the window is the current bucket and
    the nine before it, so an attempt is forgotten between ``0.9*window_s`` and ``window_s``
    after it happened. O(1) memory and O(1) amortized per call, no allocation. Time going
    backwards is taken as the latest time seen. Not thread-safe.
    """

    __slots__ = (
        "_allow_min",
        "_firsts",
        "_head",
        "_min_per_s",
        "_n_firsts",
        "_n_retries",
        "_ratio",
        "_retries",
        "_width",
        "_window_s",
    )

    _BUCKETS = 10

    def __init__(self, ratio: float = 0.1, window_s: float = 10.0, min_per_s: float = 1.0) -> None:
        _finite_at_least("RetryBudget", "ratio", ratio, 0.0)
        if not (window_s > 0.0 and math.isfinite(window_s)):
            raise ValueError(f"RetryBudget.window_s must be a finite number > 0 (got {window_s!r})")
        _finite_at_least("RetryBudget", "min_per_s", min_per_s, 0.0)
        self._ratio: float = float(ratio)
        self._window_s: float = float(window_s)
        self._min_per_s: float = float(min_per_s)
        self._allow_min: float = self._min_per_s * self._window_s
        self._width: float = self._window_s / self._BUCKETS
        self._firsts: list[int] = [0] * self._BUCKETS
        self._retries: list[int] = [0] * self._BUCKETS
        self._n_firsts: int = 0  # sums over the buckets in the window
        self._n_retries: int = 0
        self._head: int | None = None  # absolute index of the current bucket

    @property
    def ratio(self) -> float:
        """Retries allowed per first attempt in the window (0.1 = at most +10 % load)."""
        return self._ratio

    @property
    def window_s(self) -> float:
        """Length of the sliding window, in seconds."""
        return self._window_s

    @property
    def min_per_s(self) -> float:
        """Retries per second allowed even with no first attempts at all."""
        return self._min_per_s

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self.ratio!r}, window_s={self.window_s!r}, "
            f"min_per_s={self.min_per_s!r})"
        )

    def _advance(self, now: float) -> int:
        """Move the window to ``now``; answer the ring slot of the current bucket."""
        head = self._head
        try:
            idx = math.floor(now / self._width)
        except (ValueError, OverflowError):  # NaN or infinite time: stay where we are
            idx = 0 if head is None else head
        if head is None:  # first call: every bucket is still empty
            self._head = idx
        elif idx > head:
            n = self._BUCKETS
            firsts, retries = self._firsts, self._retries
            if idx - head >= n:  # the whole window has passed
                for slot in range(n):
                    firsts[slot] = retries[slot] = 0
                self._n_firsts = self._n_retries = 0
            else:  # forget the buckets that fell out of the window
                for i in range(head + 1, idx + 1):
                    slot = i % n
                    self._n_firsts -= firsts[slot]
                    self._n_retries -= retries[slot]
                    firsts[slot] = retries[slot] = 0
            self._head = idx
        else:  # same bucket, or time went backwards: stay in the current bucket
            idx = head
        return idx % self._BUCKETS

    def record_first(self, now: float) -> None:
        """Count one first attempt at ``now``: it earns the budget ``ratio`` of a retry."""
        slot = self._advance(now)
        self._firsts[slot] += 1
        self._n_firsts += 1

    def record_outcome(self, now: float, ok: bool) -> None:
        """Outcomes do not change a ratio budget (a token budget is refilled by them)."""

    def can_retry(self, now: float) -> bool:
        """True if one more retry keeps ``retries <= ratio*firsts + min_per_s*window_s``.

        Only asks; `spend` is what charges a retry.
        """
        self._advance(now)
        allowance = self._ratio * self._n_firsts + self._allow_min
        return self._n_retries + 1 <= allowance

    def spend(self, now: float) -> bool:
        """Charge one retry at ``now`` if the budget allows it; False (nothing charged) if not.

        The retry is counted when it is *decided*, not when it runs: a thousand failures in
        the same instant each see the retries decided before them, so ratio 0.1 after 1,000
        first attempts allows exactly 100 + min_per_s x window_s of them, not 1,000.
        """
        if not self.can_retry(now):
            return False
        slot = self._advance(now)
        self._retries[slot] += 1
        self._n_retries += 1
        return True

    def counts(self, now: float) -> tuple[int, int]:
        """``(first attempts, retries)`` in the window at ``now``, for metrics and display."""
        self._advance(now)
        return self._n_firsts, self._n_retries


class RetryTokens:
    """A retry takes ``cost`` tokens from a bucket of ``capacity`` and is refused when fewer
    are left; every successful attempt puts ``refund`` back, up to the capacity.

    Why, beside a ratio budget: a ratio budget keeps allowing ``ratio`` of the traffic as
    retries for as long as first attempts keep coming, so a server pushed past its capacity
    by retries can stay there (a metastable failure). Funded by *successes* instead (the AWS
    SDKs' retry quota; gRPC's retry throttling works the same way), the bucket empties under a
    lasting overload and retries stop altogether until the downstream answers again. With the
    AWS defaults (capacity 500, cost 5, refund 1): 100 retries in a row empty it; then each
    success earns a fifth of a retry.

    Sans-IO and clock-free: ``now`` is accepted for the shared interface and ignored.
    """

    __slots__ = ("_capacity", "_cost", "_refund", "_tokens")

    def __init__(self, capacity: float = 500.0, cost: float = 5.0, refund: float = 1.0) -> None:
        if not (capacity > 0.0 and math.isfinite(capacity)):
            raise ValueError(f"RetryTokens.capacity must be a finite number > 0 (got {capacity!r})")
        if not (cost > 0.0 and math.isfinite(cost)):
            raise ValueError(f"RetryTokens.cost must be a finite number > 0 (got {cost!r})")
        _finite_at_least("RetryTokens", "refund", refund, 0.0)
        self._capacity = float(capacity)
        self._cost = float(cost)
        self._refund = float(refund)
        self._tokens = float(capacity)

    def __repr__(self) -> str:
        return (f"RetryTokens(capacity={self._capacity!r}, cost={self._cost!r}, "
                f"refund={self._refund!r})")

    @property
    def tokens(self) -> float:
        """Tokens left now (for metrics and display)."""
        return self._tokens

    def record_first(self, now: float) -> None:
        """First attempts earn nothing here: only successes do."""

    def record_outcome(self, now: float, ok: bool) -> None:
        """A successful attempt refunds ``refund`` tokens (never above the capacity)."""
        if ok:
            tokens = self._tokens + self._refund
            self._tokens = tokens if tokens < self._capacity else self._capacity

    def can_retry(self, now: float) -> bool:
        return self._tokens >= self._cost

    def spend(self, now: float) -> bool:
        """Take ``cost`` tokens for one retry if there are enough; False otherwise."""
        if self._tokens < self._cost:
            return False
        self._tokens -= self._cost
        return True


RetryThrottle = RetryBudget | RetryTokens
"""What bounds the retries of everyone sharing it: a ratio budget or a token budget. Both
answer ``record_first``, ``record_outcome``, ``can_retry`` and ``spend`` (which charges)."""


def _as_kinds(owner: str, value: frozenset[str]) -> frozenset[str]:
    if isinstance(value, str):  # frozenset("timeout") would silently be a set of letters
        raise ValueError(f"RetryPolicy.{owner} must be a set of error kinds, got {value!r}")
    return frozenset(value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which errors to retry, how many times, and how long to wait in between.

    ``retryable`` and ``fatal`` classify error kinds (any strings, ``ErrorKind`` for the
    standard ones); a kind in both is fatal (the safe answer), a kind in neither follows
    ``unknown_retryable``. A task-level timeout detected by the watchdog is governed by
    ``retry_timeouts`` alone (``decide_timeout``), because whether a hung task may be run
    again is a property of the task (is it idempotent?), not of an error.

    Default: 3 retries (4 attempts), exponential full-jitter backoff from 0.1 s, capped at
    30 s. Worst case before giving up: ceilings 0.1 + 0.2 + 0.4 = 0.7 s of waiting, on
    average half of that.
    """

    max_retry: int = 3
    backoff: Backoff = Backoff()
    retryable: frozenset[str] = RETRYABLE_DEFAULT
    fatal: frozenset[str] = FATAL_DEFAULT
    unknown_retryable: bool = True
    retry_timeouts: bool = True

    def __post_init__(self) -> None:
        mr = self.max_retry
        if isinstance(mr, bool) or not isinstance(mr, int) or mr < 0:
            raise ValueError(f"RetryPolicy.max_retry must be an integer >= 0 (got {mr!r})")
        object.__setattr__(self, "retryable", _as_kinds("retryable", self.retryable))
        object.__setattr__(self, "fatal", _as_kinds("fatal", self.fatal))

    def is_retryable(self, error_kind: str) -> bool:
        """Classify an error kind: fatal wins over retryable; unknown -> ``unknown_retryable``."""
        if error_kind in self.fatal:
            return False
        if error_kind in self.retryable:
            return True
        return self.unknown_retryable

    def decide(
        self,
        retry_count: int,
        error_kind: str,
        rng: random.Random,
        previous_delay: float | None = None,
        budget: RetryThrottle | None = None,
        now: float = 0.0,
    ) -> RetryDecision:
        """Retry or stop after a failure, given ``retry_count`` retries already done.

        Retry iff the kind is retryable, ``retry_count < max_retry`` and the budget (if any)
        allows one more at ``now``; then ``delay = backoff.delay(retry_count + 1, rng,
        previous_delay)``. Checked in that order, and ``rng`` is only drawn from when the
        answer is to retry. A budget is charged here, when the retry is decided (see
        ``RetryBudget.spend``).
        """
        if not self.is_retryable(error_kind):
            return RetryDecision(False, 0.0, f"not retryable: {str(error_kind)!r}")
        return self._retry(retry_count, error_kind, rng, previous_delay, budget, now)

    def decide_timeout(
        self,
        retry_count: int,
        rng: random.Random,
        previous_delay: float | None = None,
        budget: RetryThrottle | None = None,
        now: float = 0.0,
    ) -> RetryDecision:
        """Like ``decide`` for a task-level timeout, ruled by ``retry_timeouts`` instead of
        the classification (``retryable``/``fatal`` are not consulted)."""
        if not self.retry_timeouts:
            return _TIMEOUTS_NOT_RETRIED
        return self._retry(retry_count, ErrorKind.TIMEOUT, rng, previous_delay, budget, now)

    def _retry(
        self,
        retry_count: int,
        error_kind: str,
        rng: random.Random,
        previous_delay: float | None,
        budget: RetryThrottle | None,
        now: float,
    ) -> RetryDecision:
        max_retry = self.max_retry
        if retry_count >= max_retry:
            return RetryDecision(False, 0.0, f"attempts exhausted ({max_retry} retries)")
        if budget is not None and not budget.spend(now):
            return _BUDGET_EXHAUSTED
        number = retry_count + 1
        return RetryDecision.retrying(self.backoff.delay(number, rng, previous_delay),
                                      error_kind, number, max_retry)
