"""TokenBucket: table cases for the documented numbers, properties for the guarantees."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskfuse.core.ratelimit import TokenBucket
from tests.scale import examples


def slack(rate: float, times: list[float]) -> float:
    """Float slack on "at most burst + rate*T": each operation may round the bucket's time by
    half an ulp of the clock, i.e. rate*ulp(t) tokens (1e-7 at t=1e6 s and 2000/s)."""
    return 1e-9 + 2 * len(times) * rate * math.ulp(max(1.0, abs(times[-1])))


rates = st.floats(min_value=0.05, max_value=2000.0, allow_nan=False, allow_infinity=False)
bursts = st.one_of(
    st.sampled_from([1.0, 2.0, 5.0, 20.0]),
    st.floats(min_value=1.0, max_value=50.0, allow_nan=False, allow_infinity=False),
)
starts = st.sampled_from([0.0, 1.5, 12345.678, 1e6 + 0.1])
gaps = st.lists(
    st.one_of(
        st.just(0.0),
        st.floats(min_value=0.0, max_value=0.05, allow_nan=False),
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False),
    ),
    min_size=1,
    max_size=150,
)


def times_from(start: float, deltas: list[float]) -> list[float]:
    out, t = [], start
    for d in deltas:
        t += d
        out.append(t)
    return out


def max_excess(starts_: list[float], amounts: list[float], rate: float) -> float:
    """max over windows [t_i, t_j] of (tokens started in it) - rate*(t_j - t_i).

    The busiest window of any length begins and ends at a start time, so checking
    ``excess <= burst`` over all pairs i <= j checks every window; done in O(n) with
    prefix sums: excess(i, j) = (S_j - rate*t_j) - (S_{i-1} - rate*t_i).
    """
    best = -math.inf
    low = math.inf
    prefix = 0.0
    t0 = starts_[0]
    for t_abs, a in zip(starts_, amounts, strict=True):
        t = t_abs - t0
        low = min(low, prefix - rate * t)  # candidate window opening at this start
        prefix += a
        best = max(best, prefix - rate * t - low)
    return best


# --- construction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "burst", "needle"),
    [
        (0, 1, "rate must be a finite number > 0 tokens/s, got 0"),
        (-2.5, 1, "got -2.5"),
        (math.nan, 1, "got nan"),
        (math.inf, 1, "got inf"),
        (1.0, 0.5, "burst must be a finite number >= 1, got 0.5"),
        (1.0, 0, "got 0"),
        (1.0, math.nan, "got nan"),
    ],
)
def test_rejects_bad_arguments(rate: float, burst: float, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        TokenBucket(rate, burst)
    assert needle in str(info.value)


def test_attributes_are_readable_not_writable() -> None:
    b = TokenBucket(10, 3)
    assert (b.rate, b.burst) == (10.0, 3.0)
    with pytest.raises(AttributeError):
        b.rate = 5.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        b.extra = 1  # type: ignore[attr-defined]


def test_negative_n_is_refused() -> None:
    b = TokenBucket(10, 3)
    with pytest.raises(ValueError, match="-1"):
        b.try_acquire(0.0, -1)
    with pytest.raises(ValueError, match="nan"):
        b.reserve(0.0, math.nan)


# --- the documented numbers ---------------------------------------------------------------


def test_docstring_example() -> None:
    b = TokenBucket(rate=10, burst=2)
    assert b.try_acquire(0.0) and b.try_acquire(0.0)
    assert not b.try_acquire(0.0)
    assert b.next_free(0.0) == pytest.approx(0.1)
    assert b.reserve(0.0) == pytest.approx(0.1)
    assert b.reserve(0.0) == pytest.approx(0.2)
    assert b.tokens(0.0) == pytest.approx(-2.0)
    assert b.tokens(0.25) == pytest.approx(0.5)


def test_starts_full_at_start_and_refills_to_burst_only() -> None:
    b = TokenBucket(rate=2, burst=4, start=100.0)
    assert b.tokens(100.0) == 4.0
    assert b.tokens(50.0) == 4.0  # before start: taken as start
    assert sum(b.try_acquire(100.0) for _ in range(6)) == 4
    assert b.tokens(100.0) == pytest.approx(0.0)
    assert b.tokens(101.0) == pytest.approx(2.0)
    assert b.tokens(1000.0) == 4.0  # capped


def test_partial_tokens_and_n() -> None:
    b = TokenBucket(rate=1, burst=3)
    assert not b.try_acquire(0.0, 3.5)  # more than burst: never granted
    assert b.try_acquire(0.0, 2.5)
    assert not b.try_acquire(0.0, 1.0)  # only 0.5 left
    assert b.tokens(0.0) == pytest.approx(0.5)  # refused request took nothing
    assert b.next_free(0.0) == pytest.approx(0.5)
    assert b.try_acquire(0.5)
    assert b.try_acquire(0.5, 0.0)  # zero tokens: always fine


@pytest.mark.parametrize(("rate", "burst"), [(100, 20), (10, 1), (3, 7), (0.5, 2)])
def test_kth_reserve_waits_k_minus_burst_over_rate(rate: float, burst: float) -> None:
    b = TokenBucket(rate, burst, start=5.0)
    for k in range(1, 61):
        assert b.reserve(5.0) == pytest.approx(max(0.0, (k - burst) / rate), abs=1e-9)


def test_reserve_zero_exactly_when_try_acquire_would_grant() -> None:
    a, b = TokenBucket(3, 2), TokenBucket(3, 2)
    rng = random.Random(7)
    t = 0.0
    for _ in range(2000):
        t += rng.choice([0.0, 0.1, 1 / 3, rng.random()])
        n = rng.choice([1.0, 0.5, 2.0])
        granted = a.try_acquire(t, n)
        if granted:
            assert b.reserve(t, n) == 0.0
        else:  # keep the buckets identical: b takes nothing either
            assert b.next_free(t) == a.next_free(t)
        assert a.tokens(t) == b.tokens(t)


def test_try_acquire_does_not_jump_the_reservation_queue() -> None:
    b = TokenBucket(rate=10, burst=1)
    assert b.reserve(0.0) == 0.0
    assert b.reserve(0.0) == pytest.approx(0.1)
    assert b.reserve(0.0) == pytest.approx(0.2)
    assert not b.try_acquire(0.15)  # debt outstanding
    assert b.next_free(0.15) == pytest.approx(0.3)
    assert b.try_acquire(b.next_free(0.15))


def test_time_going_backwards_is_taken_as_the_latest_time() -> None:
    b = TokenBucket(rate=1, burst=2)
    assert b.try_acquire(10.0) and b.try_acquire(10.0)
    assert not b.try_acquire(3.0)  # no negative refill, no double grant
    assert b.tokens(3.0) == pytest.approx(0.0)
    assert b.next_free(3.0) == pytest.approx(11.0)
    assert b.reserve(4.0) == pytest.approx(1.0)  # measured from t=10, not t=4
    assert not b.try_acquire(math.nan)


def test_set_rate_keeps_tokens_in_hand() -> None:
    b = TokenBucket(rate=1, burst=10)
    for _ in range(10):
        assert b.try_acquire(0.0)
    assert b.tokens(2.0) == pytest.approx(2.0)
    b.set_rate(100, 2.0)
    assert b.rate == 100.0
    assert b.tokens(2.0) == pytest.approx(2.0)  # accrued so far: kept
    assert b.tokens(2.01) == pytest.approx(3.0)  # then at the new rate
    assert b.tokens(3.0) == 10.0
    with pytest.raises(ValueError, match="got 0"):
        b.set_rate(0, 3.0)


def test_set_rate_keeps_reservations_in_time() -> None:
    b = TokenBucket(rate=10, burst=1)
    b.reserve(0.0)
    assert b.reserve(0.0) == pytest.approx(0.1)
    assert b.reserve(0.0) == pytest.approx(0.2)  # debt repaid at t=0.2
    b.set_rate(1, 0.05)
    assert b.next_free(0.05) == pytest.approx(1.2)  # 0.2, then one token at 1/s
    b.set_rate(100, 0.05)
    assert b.reserve(0.05) == pytest.approx(0.2 + 0.01 - 0.05)


def test_set_rate_on_a_full_bucket_stays_full() -> None:
    b = TokenBucket(rate=3, burst=7)
    b.set_rate(0.1, 50.0)
    assert b.tokens(50.0) == 7.0
    assert sum(b.try_acquire(50.0) for _ in range(9)) == 7


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=examples(150))
@given(rate=rates, burst=bursts, start=starts, deltas=gaps, data=st.data())
def test_try_acquire_grants_fit_every_window(
    rate: float, burst: float, start: float, deltas: list[float], data: st.DataObject
) -> None:
    b = TokenBucket(rate, burst, start=start)
    ns = data.draw(
        st.lists(
            st.sampled_from([1.0, 1.0, 0.5, 2.0, 3.5]), min_size=len(deltas), max_size=len(deltas)
        )
    )
    at, amounts = [], []
    for t, n in zip(times_from(start, deltas), ns, strict=True):
        for _ in range(3):  # several callers at the same instant
            if b.try_acquire(t, n):
                at.append(t)
                amounts.append(n)
    if at:
        assert max_excess(at, amounts, rate) <= burst + slack(rate, at)


@settings(max_examples=examples(150))
@given(rate=rates, burst=bursts, start=starts, deltas=gaps)
def test_reserved_start_times_fit_every_window_and_are_fifo(
    rate: float, burst: float, start: float, deltas: list[float]
) -> None:
    b = TokenBucket(rate, burst, start=start)
    begins = []
    for t in times_from(start, deltas):
        for _ in range(2):
            wait = b.reserve(t)
            assert wait >= 0.0
            begins.append(t + wait)
    tol = slack(rate, begins)
    # FIFO: reserved start times never decrease
    assert all(b2 >= b1 - tol / rate for b1, b2 in pairwise(begins))
    assert max_excess(begins, [1.0] * len(begins), rate) <= burst + tol


@settings(max_examples=examples(100))
@given(
    rate=rates, burst=bursts, deltas=gaps, picks=st.lists(st.booleans(), min_size=150, max_size=150)
)
def test_mixed_grants_and_reservations_fit_every_window(
    rate: float, burst: float, deltas: list[float], picks: list[bool]
) -> None:
    b = TokenBucket(rate, burst)
    begins = []
    for t, use_reserve in zip(times_from(0.0, deltas), picks, strict=False):
        if use_reserve:
            begins.append(t + b.reserve(t))
        elif b.try_acquire(t):
            begins.append(t)
    begins.sort()
    if begins:
        tol = slack(rate, begins)
        assert max_excess(begins, [1.0] * len(begins), rate) <= burst + tol


@settings(max_examples=examples(60))
@given(rate=rates, burst=st.sampled_from([1.0, 1.5, 4.0, 10.0]), start=starts)
def test_driver_at_next_free_is_always_granted_and_rate_converges(
    rate: float, burst: float, start: float
) -> None:
    """A driver that sleeps until next_free() is granted there (no spin) and, saturating,
    gets `rate` grants per second in the long run (within 1 %)."""
    b = TokenBucket(rate, burst, start=start)
    t = start
    grants = 0
    target = 200 * (burst + 1)  # long enough that the initial burst is < 1 % of the count
    while grants < target:
        nxt = b.next_free(t)
        assert nxt >= t
        t = nxt
        assert b.try_acquire(t)
        grants += 1
    assert (grants - burst) / (t - start) == pytest.approx(rate, rel=1e-6)
    assert grants / (t - start) == pytest.approx(rate, rel=0.01)


@settings(max_examples=examples(25))
@given(
    rate=st.floats(min_value=0.5, max_value=500.0),
    burst=st.sampled_from([1.0, 2.0, 5.0]),
    seed=st.integers(0, 2**32),
)
def test_backlogged_random_arrivals_converge_to_rate(rate: float, burst: float, seed: int) -> None:
    """Callers arrive at random at twice the rate and queue; the head of the queue comes back
    at next_free() when refused. Under that saturation grants/s -> rate within 1 %."""
    rng = random.Random(seed)
    b = TokenBucket(rate, burst)
    horizon = 300.0 * (burst + 1) / rate  # the initial burst is < 1/300 of what rate yields
    t, grants, queued = 0.0, 0, 0
    arrival = rng.expovariate(2.0 * rate)
    while t < horizon:
        if queued and b.next_free(t) <= arrival:
            t = b.next_free(t)
            assert b.try_acquire(t)
            queued -= 1
            grants += 1
        else:
            t = arrival
            arrival += rng.expovariate(2.0 * rate)
            if b.try_acquire(t):
                grants += 1
            else:
                queued += 1
    assert grants / t == pytest.approx(rate, rel=0.01)


@settings(max_examples=examples(100))
@given(
    rate=rates,
    burst=bursts,
    times=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=80),
)
def test_backwards_time_equals_running_max(rate: float, burst: float, times: list[float]) -> None:
    a, b = TokenBucket(rate, burst), TokenBucket(rate, burst)
    latest = 0.0
    for i, t in enumerate(times):
        latest = max(latest, t)
        if i % 3 == 2:
            assert a.reserve(t) == b.reserve(latest)
        else:
            assert a.try_acquire(t) == b.try_acquire(latest)
        assert a.tokens(t) == b.tokens(latest)
        assert a.next_free(t) == b.next_free(latest)
