"""Adaptive concurrency limits: move a bulkhead's size from observed latency and errors.

Theory of operation
-------------------
A fixed bulkhead size is a guess (``QPS x latency x headroom``) that goes stale when the
downstream slows down or its provider-side limit changes. An adaptive limit watches every
finished call (``on_sample``) and answers the limit to use next, always within the configured
``[min_limit, max_limit]``; the driver applies it with ``Bulkhead.set_limit`` (which wakes
waiters when the limit rises and drains the excess when it falls).

Pick one:

* ``AIMD``: TCP-like. Slow and predictable: +``increase`` per window of ``limit`` good samples,
  ``x backoff_ratio`` on an error, a 429/timeout, or latency above a threshold. Pick it when the
  downstream signals overload explicitly (429, 503, timeouts) or you know its latency SLO.
* ``Gradient2``: Netflix concurrency-limits' Gradient2. Compares short-term latency with a long
  exponential average; grows while they agree, shrinks when latency rises. Pick it when the
  downstream degrades by getting slower rather than by failing, and you know no threshold.
* ``Vegas``: Netflix's Vegas. Estimates the queue at the downstream from the lowest latency
  seen (``rtt_noload``). Pick it when the no-load latency is stable and well defined.

``in_flight`` is the number of calls to this downstream in flight when the sample was taken.
Gradient2 and Vegas do not move the limit while ``in_flight < limit / 2`` (the caller is
"app-limited": latency then says nothing about the limit). AIMD does not look at it.

Everything is deterministic (no randomness, no clock). Not thread-safe.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

__all__ = ["AIMD", "AdaptiveLimit", "Gradient2", "Vegas", "make_adaptive"]


@runtime_checkable
class AdaptiveLimit(Protocol):
    """What a driver needs from an adaptive limit."""

    limit: int

    def on_sample(self, now: float, latency: float, ok: bool, in_flight: int) -> int:
        """Take one finished call; return the (possibly new) limit, within its bounds."""
        ...


def _check_bounds(initial: int, min_limit: int, max_limit: int) -> None:
    for field, v in (("initial", initial), ("min_limit", min_limit), ("max_limit", max_limit)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{field} must be an integer >= 1, got {v!r}")
    if min_limit > max_limit:
        raise ValueError(f"min_limit {min_limit!r} must be <= max_limit {max_limit!r}")
    if not min_limit <= initial <= max_limit:
        raise ValueError(
            f"initial {initial!r} must be within [min_limit, max_limit] = "
            f"[{min_limit!r}, {max_limit!r}]"
        )


def _check_real(field: str, v: object, low: float, high: float, *, open_low: bool) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if ok:
        x = float(v)  # type: ignore[arg-type]
        ok = (x > low if open_low else x >= low) and x <= high
    if not ok:
        lb = "(" if open_low else "["
        raise ValueError(f"{field} must be a number in {lb}{low:g}, {high:g}], got {v!r}")
    return float(v)  # type: ignore[arg-type]


class AIMD:
    """Additive increase, multiplicative decrease.

    * Increase: each time ``limit`` consecutive good samples have been seen (about one
      "round trip" of the whole limit), ``limit += increase``.
    * Decrease: on a bad sample (``ok`` false: error, 429, timeout; or latency above
      ``latency_threshold_s`` when set), ``limit = floor(limit * backoff_ratio)``, at most once
      per ``cooldown_s``: one overload episode produces a burst of failures, and reacting to
      each of them would collapse the limit to ``min_limit``. A bad sample also restarts the
      count of good ones.

    Worked number: limit 20, ratio 0.9: an error gives 18; then 18 good samples give 19,
    19 more give 20.
    """

    __slots__ = (
        "_good",
        "_last_decrease",
        "backoff_ratio",
        "cooldown_s",
        "increase",
        "latency_threshold_s",
        "limit",
        "max_limit",
        "min_limit",
    )

    def __init__(
        self,
        initial: int,
        min_limit: int = 1,
        max_limit: int = 200,
        increase: int = 1,
        backoff_ratio: float = 0.9,
        latency_threshold_s: float | None = None,
        cooldown_s: float = 1.0,
    ) -> None:
        _check_bounds(initial, min_limit, max_limit)
        if isinstance(increase, bool) or not isinstance(increase, int) or increase < 1:
            raise ValueError(f"increase must be an integer >= 1, got {increase!r}")
        self.backoff_ratio = _check_real("backoff_ratio", backoff_ratio, 0, 1, open_low=True)
        if self.backoff_ratio == 1:
            raise ValueError(f"backoff_ratio must be < 1, got {backoff_ratio!r}")
        if latency_threshold_s is not None:
            latency_threshold_s = _check_real(
                "latency_threshold_s", latency_threshold_s, 0, math.inf, open_low=True
            )
        self.latency_threshold_s: float | None = latency_threshold_s
        self.cooldown_s = _check_real("cooldown_s", cooldown_s, 0, math.inf, open_low=False)
        self.limit: int = initial
        self.min_limit: int = min_limit
        self.max_limit: int = max_limit
        self.increase: int = increase
        self._good = 0
        self._last_decrease = -math.inf

    def __repr__(self) -> str:
        return f"AIMD(limit={self.limit}, bounds=[{self.min_limit}, {self.max_limit}])"

    def on_sample(self, now: float, latency: float, ok: bool, in_flight: int) -> int:
        """Take one finished call; return the limit to use next."""
        thr = self.latency_threshold_s
        if ok and (thr is None or latency <= thr):
            good = self._good + 1
            if good >= self.limit:
                good = 0
                self.limit = min(self.max_limit, self.limit + self.increase)
            self._good = good
            return self.limit
        self._good = 0
        if now - self._last_decrease >= self.cooldown_s:
            self._last_decrease = now
            self.limit = max(self.min_limit, int(self.limit * self.backoff_ratio))
        return self.limit


class Gradient2:
    """Netflix concurrency-limits' Gradient2, with time and randomness taken out.

    Per good sample (``rtt`` = its latency):

    * ``long = EMA(rtt)`` over ``long_window`` samples (a plain mean over the first 10, then
      factor ``2 / (long_window + 1)``); if ``long / rtt > 2``, ``long *= 0.95`` so the
      average comes back down quickly after a long overload.
    * ``gradient = clamp(tolerance * long / rtt, 0.5, 1.0)``: 1 while latency stays within
      ``tolerance`` times its usual level, down to 0.5 (never a harsher cut from one outlier).
    * ``new = limit * gradient + sqrt(limit)`` (the ``sqrt`` term is the queue allowed at
      the downstream, what makes the limit probe upwards), then smoothed:
      ``limit = limit * (1 - smoothing) + new * smoothing``, clamped to the bounds.

    A failed sample (``ok`` false) is not fed to the averages (a fast 429 would look like
    good news) and is taken as congestion: gradient 0.5.

    Worked number: limit 50, long 0.1 s, a sample at 0.3 s: gradient = clamp(1.5 x 0.1 / 0.3)
    = 0.5, new = 25 + 7.07 = 32.07, limit = 40 + 6.41 = 46.41 -> 46. At 0.1 s instead:
    gradient 1, new = 57.07, limit = 51.41 -> 51.
    """

    __slots__ = (
        "_count",
        "_estimate",
        "_factor",
        "_long",
        "_sum",
        "limit",
        "long_window",
        "max_limit",
        "min_limit",
        "smoothing",
        "tolerance",
    )

    _WARMUP = 10

    def __init__(
        self,
        initial: int,
        min_limit: int = 1,
        max_limit: int = 200,
        smoothing: float = 0.2,
        long_window: int = 600,
        tolerance: float = 1.5,
    ) -> None:
        _check_bounds(initial, min_limit, max_limit)
        self.smoothing = _check_real("smoothing", smoothing, 0, 1, open_low=True)
        if isinstance(long_window, bool) or not isinstance(long_window, int) or long_window < 1:
            raise ValueError(f"long_window must be an integer >= 1, got {long_window!r}")
        self.tolerance = _check_real("tolerance", tolerance, 1, math.inf, open_low=False)
        self.long_window: int = long_window
        self.limit: int = initial
        self.min_limit: int = min_limit
        self.max_limit: int = max_limit
        self._estimate = float(initial)
        self._factor = 2.0 / (long_window + 1)
        self._long = 0.0
        self._sum = 0.0
        self._count = 0

    def __repr__(self) -> str:
        return (
            f"Gradient2(limit={self.limit}, estimate={self._estimate:.2f}, "
            f"long_rtt={self._long:.4g}, bounds=[{self.min_limit}, {self.max_limit}])"
        )

    @property
    def long_rtt(self) -> float:
        """The long-term latency average (seconds), 0 before the first good sample."""
        return self._long

    def on_sample(self, now: float, latency: float, ok: bool, in_flight: int) -> int:
        """Take one finished call; return the limit to use next."""
        est = self._estimate
        if ok and latency > 0:
            if self._count < self._WARMUP:
                self._count += 1
                self._sum += latency
                long = self._sum / self._count
            else:
                f = self._factor
                long = self._long * (1 - f) + latency * f
            if long > 2 * latency:
                long *= 0.95
            self._long = long
            gradient = self.tolerance * long / latency
            if gradient > 1.0:
                gradient = 1.0
            elif gradient < 0.5:
                gradient = 0.5
        elif ok:
            return self.limit  # a zero latency carries no information about queueing
        else:
            gradient = 0.5
        if in_flight < est / 2:
            return self.limit  # app-limited: latency says nothing about the limit
        s = self.smoothing
        new = est * (1 - s) + (est * gradient + math.sqrt(est)) * s
        if new < self.min_limit:
            new = float(self.min_limit)
        elif new > self.max_limit:
            new = float(self.max_limit)
        self._estimate = new
        self.limit = int(new)
        return self.limit


class Vegas:
    """Netflix concurrency-limits' Vegas, deterministic.

    ``rtt_noload`` is the lowest latency seen; the queue at the downstream is estimated as
    ``queue = ceil(limit x (1 - rtt_noload / rtt))``. With ``lg = max(1, log10(limit))``,
    ``alpha = 3 lg``, ``beta = 6 lg``:

    * ``queue <= lg``: far from saturation, ``limit += beta``;
    * ``queue < alpha``: ``limit += lg``;
    * ``queue > beta``: too much queueing, ``limit -= lg``;
    * otherwise unchanged. A failed sample: ``limit -= lg``.

    Every ``probe_multiplier x limit`` samples, ``rtt_noload`` is reset to the current sample
    so a permanently changed baseline is learned (Netflix jitters this; we do not, for
    determinism). Worked number: limit 20, noload 0.1 s, a 0.2 s sample: queue = 10 > beta
    = 7.8, limit = 18.7 -> 18.
    """

    __slots__ = (
        "_estimate",
        "_noload",
        "_samples",
        "limit",
        "max_limit",
        "min_limit",
        "probe_multiplier",
        "smoothing",
    )

    def __init__(
        self,
        initial: int,
        min_limit: int = 1,
        max_limit: int = 200,
        smoothing: float = 1.0,
        probe_multiplier: int = 30,
    ) -> None:
        _check_bounds(initial, min_limit, max_limit)
        self.smoothing = _check_real("smoothing", smoothing, 0, 1, open_low=True)
        if (
            isinstance(probe_multiplier, bool)
            or not isinstance(probe_multiplier, int)
            or probe_multiplier < 1
        ):
            raise ValueError(f"probe_multiplier must be an integer >= 1, got {probe_multiplier!r}")
        self.probe_multiplier: int = probe_multiplier
        self.limit: int = initial
        self.min_limit: int = min_limit
        self.max_limit: int = max_limit
        self._estimate = float(initial)
        self._noload = 0.0
        self._samples = 0

    def __repr__(self) -> str:
        return (
            f"Vegas(limit={self.limit}, rtt_noload={self._noload:.4g}, "
            f"bounds=[{self.min_limit}, {self.max_limit}])"
        )

    @property
    def rtt_noload(self) -> float:
        """The lowest latency seen since the last probe reset (seconds), 0 before any."""
        return self._noload

    def on_sample(self, now: float, latency: float, ok: bool, in_flight: int) -> int:
        """Take one finished call; return the limit to use next."""
        est = self._estimate
        lg = max(1.0, math.log10(est))
        if not ok:
            new = est - lg
        else:
            if latency <= 0:
                return self.limit
            self._samples += 1
            if self._samples >= self.probe_multiplier * est:
                self._samples = 0
                self._noload = latency
                return self.limit
            if self._noload == 0.0 or latency < self._noload:
                self._noload = latency
                return self.limit
            if in_flight < est / 2:
                return self.limit  # app-limited
            queue = math.ceil(est * (1 - self._noload / latency))
            if queue <= lg:
                new = est + 6 * lg
            elif queue < 3 * lg:
                new = est + lg
            elif queue > 6 * lg:
                new = est - lg
            else:
                return self.limit
        s = self.smoothing
        new = est * (1 - s) + new * s
        if new < self.min_limit:
            new = float(self.min_limit)
        elif new > self.max_limit:
            new = float(self.max_limit)
        self._estimate = new
        self.limit = int(new)
        return self.limit


_KINDS: dict[str, type[AIMD] | type[Gradient2] | type[Vegas]] = {
    "aimd": AIMD,
    "gradient2": Gradient2,
    "vegas": Vegas,
}


def make_adaptive(
    kind: str, initial: int, min_limit: int, max_limit: int, **options: Any
) -> AdaptiveLimit:
    """Build an adaptive limit by name (for scenario files): "aimd", "gradient2" or "vegas".

    ``options`` are the constructor's keyword arguments; an unknown one raises ``TypeError``.
    """
    cls = _KINDS.get(kind)
    if cls is None:
        raise ValueError(f"adaptive limit kind must be one of {sorted(_KINDS)}, got {kind!r}")
    return cls(initial, min_limit=min_limit, max_limit=max_limit, **options)
