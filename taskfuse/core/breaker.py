"""A circuit breaker per downstream, with time as an argument.

Rules and theory of operation
-----------------------------
Three states (``BreakerState``), moves only through this module:

* CLOSED: every call is allowed; each outcome is recorded in a sliding window. When the window
  holds at least ``minimum_calls`` calls and ``failures / calls >= failure_rate``, the breaker
  OPENs and the window is cleared.
* OPEN: every call is refused, so a sick downstream gets time to recover and our workers do
  not pile up waiting on it. Outcomes that arrive now are late results of calls let through
  before it opened: they are ignored. After ``open_wait_s`` the breaker becomes HALF_OPEN
  lazily, at the first question asked with ``now >= reopen_at()`` (drivers wake up then).
* HALF_OPEN: exactly ``half_open_probes`` calls are let through. When all of them have
  reported, ``failed / half_open_probes >= failure_rate`` re-OPENs, anything else CLOSEs with
  empty windows. A probe that was permitted but never made its call is given back with
  ``release_probe()``.

A call counts as failed when ``ok`` is false, or when ``slow_call_s`` is set and a successful
call took longer than that (a downstream answering in 30 s is as harmful to us as one that
errs: this is resilience4j's slow-call rate, folded into the failure rate).

Every change of state is reported once, as a ``BreakerChange``, to the optional listener (the
event sink), from inside the call that caused it. Nothing here reads a clock, so the lab and the
threaded runtime see the same breaker. Not thread-safe: the threaded driver wraps it in a lock.

Windows
-------
COUNT: a ring buffer of the last ``window_size`` outcomes with a running failure count; O(1)
per record. Pick it when the call rate varies a lot: the verdict always rests on the same
number of calls.

TIME: buckets of ``min(1 s, window_size / 20)`` summing calls and failures over the last
``window_size`` seconds (the oldest bucket expires whole, so the window is between
``window_size - bucket`` and ``window_size`` long); O(1) amortized per record. Pick it when old
outcomes must stop counting after a while even if few calls come (a quiet hour should not carry
the failures of a past outage).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "BreakerChange",
    "BreakerConfig",
    "BreakerState",
    "CircuitBreaker",
    "WindowKind",
]


class BreakerState(StrEnum):
    """The three states of a circuit breaker."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class WindowKind(StrEnum):
    """How the sliding window of outcomes is measured: by call count or by seconds."""

    COUNT = "count"
    TIME = "time"


_CLOSED = BreakerState.CLOSED
_OPEN = BreakerState.OPEN
_HALF_OPEN = BreakerState.HALF_OPEN


def _bad(field: str, value: object, rule: str) -> ValueError:
    return ValueError(f"BreakerConfig.{field} must be {rule}, got {value!r}")


def _is_real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """The knobs of a breaker. Frozen, so one config can be shared by many breakers.

    Worked number with the defaults: once at least 10 calls are in the window of the last 20,
    a failure rate >= 0.50 opens it (5 of the first 10, or 10 of the last 20); it refuses calls
    for 5 s, then lets 3 probes through; 2 failed probes (0.67 >= 0.5) re-open it, 0 or 1
    failed probe close it.
    """

    #: Open when failures / calls >= this over the window (0 < x <= 1).
    failure_rate: float = 0.5
    #: COUNT (last N calls) or TIME (last N seconds).
    window: WindowKind = WindowKind.COUNT
    #: Calls (COUNT, an integer) or seconds (TIME).
    window_size: float = 20
    #: No verdict before this many calls are in the window (a single early error must not trip
    #: it). With a COUNT window it may not exceed window_size, or it could never open.
    minimum_calls: int = 10
    #: OPEN -> HALF_OPEN after this many seconds.
    open_wait_s: float = 5.0
    #: Calls permitted in HALF_OPEN; all must finish before the verdict.
    half_open_probes: int = 3
    #: A successful call slower than this counts as a failure; None disables it.
    slow_call_s: float | None = None

    def __post_init__(self) -> None:
        fr = self.failure_rate
        if not _is_real(fr) or not 0 < fr <= 1:
            raise _bad("failure_rate", fr, "a number in (0, 1]")
        if not isinstance(self.window, WindowKind):
            try:
                object.__setattr__(self, "window", WindowKind(self.window))
            except ValueError:
                raise _bad("window", self.window, "'count' or 'time'") from None
        ws = self.window_size
        if not _is_real(ws) or ws <= 0:
            raise _bad("window_size", ws, "a finite number > 0")
        mc = self.minimum_calls
        if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
            raise _bad("minimum_calls", mc, "an integer >= 1")
        if self.window is WindowKind.COUNT:
            if ws != int(ws):
                raise _bad("window_size", ws, "a whole number of calls for a COUNT window")
            if mc > ws:
                raise _bad("minimum_calls", mc, f"<= window_size ({ws!r}) for a COUNT window")
        ow = self.open_wait_s
        if not _is_real(ow) or ow < 0:
            raise _bad("open_wait_s", ow, "a finite number >= 0")
        hp = self.half_open_probes
        if isinstance(hp, bool) or not isinstance(hp, int) or hp < 1:
            raise _bad("half_open_probes", hp, "an integer >= 1")
        sc = self.slow_call_s
        if sc is not None and (not _is_real(sc) or sc <= 0):
            raise _bad("slow_call_s", sc, "None or a finite number > 0")


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """One change of state, as reported to the listener (and from there to the trace)."""

    name: str
    at: float
    src: BreakerState
    dst: BreakerState
    reason: str


_DEFAULT_CONFIG = BreakerConfig()
# Epoch of "no bucket yet": any real epoch is at least a full window later, so the first record
# clears every bucket (which is how a TIME window is cleared lazily, in O(1) at open time).
_NO_EPOCH = -(2**62)


class CircuitBreaker:
    """A circuit breaker for one downstream; see the module docstring for the rules.

    Drivers ask ``allow(now)`` before a call and ``record(now, ok, latency)`` after it; the
    scheduler asks ``blocks(now)`` to keep tasks PENDING (it never consumes a probe) and
    ``reopen_at()`` to know when to look again.
    """

    __slots__ = (
        "_bucket_w",
        "_calls",
        "_failed",
        "_fails",
        "_filled",
        "_last_epoch",
        "_nb",
        "_opened_at",
        "_pos",
        "_probe_fails",
        "_probes_done",
        "_probes_taken",
        "_ring",
        "_rs",
        "_state",
        "_tcalls",
        "_tfails",
        "_zeros",
        "config",
        "listener",
        "name",
        "opens",
    )

    def __init__(
        self,
        config: BreakerConfig = _DEFAULT_CONFIG,
        name: str = "",
        listener: Callable[[BreakerChange], None] | None = None,
    ) -> None:
        self.config: BreakerConfig = config
        self.name: str = name
        self.listener = listener
        #: How many times it opened (tripped, re-opened after probes, or forced), for reports.
        self.opens: int = 0
        self._state: BreakerState = _CLOSED
        self._opened_at: float = 0.0
        self._probes_taken = 0  # permitted in this HALF_OPEN period, minus those given back
        self._probes_done = 0
        self._probe_fails = 0
        # Running totals of the window (both kinds).
        self._calls = 0
        self._fails = 0
        # COUNT window: ring of 0/1 outcomes.
        n = int(config.window_size) if config.window is WindowKind.COUNT else 0
        self._ring = bytearray(n)
        self._pos = 0
        self._filled = 0
        # TIME window: nb buckets of width bucket_w seconds.
        if config.window is WindowKind.TIME:
            ws = float(config.window_size)
            w = min(1.0, ws / 20)
            nb = max(1, math.ceil(ws / w - 1e-9))
        else:
            w, nb = 1.0, 0
        self._bucket_w = w
        self._nb = nb
        self._tcalls = [0] * nb
        self._tfails = [0] * nb
        self._zeros = (0,) * nb
        self._last_epoch = _NO_EPOCH
        self._rs = config.slow_call_s

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(name={self.name!r}, state={self._state.value}, "
            f"calls={self._calls}, failures={self._fails}, opens={self.opens})"
        )

    # -- questions ----------------------------------------------------------------------

    def state(self, now: float) -> BreakerState:
        """The state at ``now``; moves OPEN -> HALF_OPEN once the open wait has elapsed."""
        if self._state is _OPEN and now >= self._opened_at + self.config.open_wait_s:
            self._half_open(now)
        return self._state

    def allow(self, now: float) -> bool:
        """May a call go now? CLOSED: yes. OPEN: no. HALF_OPEN: yes while probes remain.

        A ``True`` in HALF_OPEN takes a probe: the caller must later ``record`` its outcome, or
        ``release_probe()`` if the call is not made after all.
        """
        st = self._state
        if st is _CLOSED:
            return True
        if st is _OPEN:
            if now < self._opened_at + self.config.open_wait_s:
                return False
            self._half_open(now)
        if self._probes_taken < self.config.half_open_probes:
            self._probes_taken += 1
            return True
        return False

    def blocks(self, now: float) -> bool:
        """``True`` when ``allow(now)`` would be ``False``, without consuming a probe.

        The scheduler uses it to hold tasks PENDING instead of dispatching them into a refusal.
        """
        st = self.state(now)
        if st is _CLOSED:
            return False
        if st is _OPEN:
            return True
        return self._probes_taken >= self.config.half_open_probes

    def reopen_at(self) -> float | None:
        """When OPEN: the time it becomes HALF_OPEN (drivers wake up then); else ``None``."""
        if self._state is _OPEN:
            return self._opened_at + self.config.open_wait_s
        return None

    @property
    def window_calls(self) -> int:
        """Calls currently in the CLOSED-state window (as of the last record), for reports."""
        return self._calls

    @property
    def window_failures(self) -> int:
        """Failures currently in the CLOSED-state window (as of the last record)."""
        return self._fails

    # -- inputs -------------------------------------------------------------------------

    def record(self, now: float, ok: bool, latency: float = 0.0) -> None:
        """Record the outcome of a call that ``allow()`` let through; may change state.

        Ignored while OPEN (a late result of a call from before it opened) and, in HALF_OPEN,
        when no permitted probe is outstanding (a late result from before, again).
        """
        rs = self._rs
        failed = (not ok) or (rs is not None and latency > rs)
        st = self._state
        if st is _OPEN:
            if now < self._opened_at + self.config.open_wait_s:
                return
            self._half_open(now)
            return  # no probe can be outstanding yet: this is a late result
        if st is _HALF_OPEN:
            self._record_probe(now, failed)
            return
        cfg = self.config
        if cfg.window is WindowKind.COUNT:
            ring = self._ring
            p = self._pos
            if self._filled == len(ring):
                self._fails -= ring[p]
            else:
                self._filled += 1
                self._calls += 1
            ring[p] = failed
            self._fails += failed
            p += 1
            self._pos = 0 if p == len(ring) else p
        else:
            self._time_add(now, failed)
        calls = self._calls
        if calls >= cfg.minimum_calls:
            rate = self._fails / calls
            if rate >= cfg.failure_rate:
                self._open(now, _CLOSED, self._trip_reason(rate, calls))

    def release_probe(self) -> bool:
        """Give back a HALF_OPEN probe permit whose call was never made (deferred, canceled).

        Returns whether a probe was given back. Safe to call for any call that ``allow()`` let
        through and that will never ``record``: outside HALF_OPEN (the call was not a probe, or
        its period is over) or with no probe outstanding, it does nothing, so a driver need not
        remember whether its call was a probe.
        """
        if self._state is not _HALF_OPEN or self._probes_taken <= self._probes_done:
            return False
        self._probes_taken -= 1
        return True

    def force_open(self, now: float, reason: str) -> None:
        """Operator action: open now (from any state), then follow the usual open wait.

        If already OPEN, the open wait restarts at ``now`` and nothing is reported.
        """
        if self._state is _OPEN:
            self._opened_at = now
            return
        self._open(now, self._state, reason)

    def reset(self, now: float) -> None:
        """Operator action: CLOSE now with empty windows (reported unless already CLOSED)."""
        src = self._state
        self._clear_window()
        self._state = _CLOSED
        if src is not _CLOSED:
            self._emit(now, src, _CLOSED, "reset")

    # -- internals ----------------------------------------------------------------------

    def _time_add(self, now: float, failed: bool) -> None:
        e = int(now // self._bucket_w)
        last = self._last_epoch
        nb = self._nb
        calls = self._tcalls
        fails = self._tfails
        if e > last:
            if e - last >= nb:
                calls[:] = self._zeros
                fails[:] = self._zeros
                self._calls = 0
                self._fails = 0
            else:
                for k in range(last + 1, e + 1):
                    i = k % nb
                    c = calls[i]
                    if c:
                        self._calls -= c
                        self._fails -= fails[i]
                        calls[i] = 0
                        fails[i] = 0
            self._last_epoch = e
        else:
            e = last  # the clock never goes back for us: count it in the newest bucket
        i = e % nb
        calls[i] += 1
        self._calls += 1
        if failed:
            fails[i] += 1
            self._fails += 1

    def _record_probe(self, now: float, failed: bool) -> None:
        if self._probes_done >= self._probes_taken:
            return  # not a probe: a late result from before it opened
        self._probes_done += 1
        self._probe_fails += failed
        n = self.config.half_open_probes
        if self._probes_done < n:
            return
        k = self._probe_fails
        rate = k / n
        fr = self.config.failure_rate
        if rate >= fr:
            self._open(now, _HALF_OPEN, f"{k}/{n} probes failed ({rate:.2f} >= {fr:.2f})")
            return
        self._clear_window()
        self._state = _CLOSED
        if k:
            reason = f"{n - k}/{n} probes ok ({k} failed: {rate:.2f} < {fr:.2f})"
        else:
            reason = f"{n}/{n} probes ok"
        self._emit(now, _HALF_OPEN, _CLOSED, reason)

    def _trip_reason(self, rate: float, calls: int) -> str:
        cfg = self.config
        text = f"failure rate {rate:.2f} >= {cfg.failure_rate:.2f} over {calls} calls"
        if cfg.window is WindowKind.TIME:
            text += f" in {cfg.window_size:g}s"
        return text

    def _open(self, now: float, src: BreakerState, reason: str) -> None:
        self._state = _OPEN
        self._opened_at = now
        self.opens += 1
        self._clear_window()
        self._emit(now, src, _OPEN, reason)

    def _half_open(self, now: float) -> None:
        self._state = _HALF_OPEN
        self._probes_taken = 0
        self._probes_done = 0
        self._probe_fails = 0
        self._emit(now, _OPEN, _HALF_OPEN, f"open wait {float(self.config.open_wait_s)!r}s elapsed")

    def _clear_window(self) -> None:
        # O(1): the ring is overwritten before it is read again; TIME buckets are zeroed
        # lazily by the next record (its epoch is then at least a full window past _NO_EPOCH).
        self._calls = 0
        self._fails = 0
        self._pos = 0
        self._filled = 0
        self._last_epoch = _NO_EPOCH
        self._probes_taken = 0
        self._probes_done = 0
        self._probe_fails = 0

    def _emit(self, now: float, src: BreakerState, dst: BreakerState, reason: str) -> None:
        listener = self.listener
        if listener is not None:
            listener(BreakerChange(self.name, now, src, dst, reason))
