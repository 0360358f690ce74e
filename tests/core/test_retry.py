"""Retry policy: backoff formulas (bounds, means, determinism), classification, budget."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskfuse.core.retry import (
    FATAL_DEFAULT,
    RETRYABLE_DEFAULT,
    Backoff,
    BackoffKind,
    ErrorKind,
    Jitter,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    RetryTokens,
)
from tests.scale import examples

N_SAMPLES = 20_000


@st.composite
def backoffs(draw: st.DrawFn) -> Backoff:
    base = draw(st.floats(min_value=0.0, max_value=100.0))
    cap = base + draw(st.floats(min_value=0.0, max_value=1000.0))
    return Backoff(
        kind=draw(st.sampled_from(BackoffKind)),
        base=base,
        cap=cap,
        multiplier=draw(st.floats(min_value=1.0, max_value=10.0)),
        jitter=draw(st.sampled_from(Jitter)),
    )


# --- ceiling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "k", "expected"),
    [
        (BackoffKind.EXPONENTIAL, 1, 0.1),
        (BackoffKind.EXPONENTIAL, 2, 0.2),
        (BackoffKind.EXPONENTIAL, 3, 0.4),
        (BackoffKind.EXPONENTIAL, 4, 0.8),
        (BackoffKind.EXPONENTIAL, 9, 25.6),
        (BackoffKind.EXPONENTIAL, 10, 30.0),
        (BackoffKind.EXPONENTIAL, 60, 30.0),
        (BackoffKind.EXPONENTIAL, 1000, 30.0),
        (BackoffKind.EXPONENTIAL, 10**9, 30.0),
        (BackoffKind.FIXED, 1, 0.1),
        (BackoffKind.FIXED, 1000, 0.1),
        (BackoffKind.NONE, 1, 0.0),
        (BackoffKind.NONE, 1000, 0.0),
    ],
)
def test_ceiling_table(kind: BackoffKind, k: int, expected: float) -> None:
    assert Backoff(kind=kind).ceiling(k) == pytest.approx(expected)


def test_ceiling_guards_the_exponent() -> None:
    assert Backoff(multiplier=10.0, cap=5.0).ceiling(400) == 5.0  # 10.0**399 overflows a float
    assert Backoff(base=0.0, cap=5.0).ceiling(5000) == 0.0  # 0 * "infinity" is still 0
    assert Backoff(multiplier=1.0, base=0.5).ceiling(10**6) == 0.5
    with pytest.raises(ValueError, match="retry_number must be >= 1, got 0"):
        Backoff().ceiling(0)


@pytest.mark.parametrize("kind", list(BackoffKind))
def test_none_jitter_is_exactly_the_ceiling(kind: BackoffKind) -> None:
    b = Backoff(kind=kind, base=0.25, cap=10.0, multiplier=3.0, jitter=Jitter.NONE)
    rng = random.Random(1)
    state = rng.getstate()
    assert [b.delay(k, rng) for k in range(1, 7)] == [b.ceiling(k) for k in range(1, 7)]
    assert rng.getstate() == state  # nothing drawn
    if kind is BackoffKind.EXPONENTIAL:
        assert [b.delay(k, rng) for k in range(1, 6)] == [0.25, 0.75, 2.25, 6.75, 10.0]


@pytest.mark.parametrize("jitter", list(Jitter))
def test_kind_none_is_zero_and_draws_nothing(jitter: Jitter) -> None:
    b = Backoff(kind=BackoffKind.NONE, jitter=jitter)
    rng = random.Random(2)
    state = rng.getstate()
    assert all(b.delay(k, rng, previous=5.0) == 0.0 for k in (1, 2, 60, 1000))
    assert rng.getstate() == state


# --- jitter bounds and means ------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(
    backoff=backoffs(),
    k=st.integers(min_value=1, max_value=60),
    seed=st.integers(0, 2**32),
    previous=st.one_of(st.none(), st.floats(min_value=0.0, max_value=2000.0)),
)
def test_every_delay_is_inside_its_formula_bounds(
    backoff: Backoff, k: int, seed: int, previous: float | None
) -> None:
    rng = random.Random(seed)
    d = backoff.delay(k, rng, previous)
    big = backoff.delay(1000, rng, previous)  # no OverflowError
    c = backoff.ceiling(k)
    assert 0.0 <= c <= backoff.cap
    if backoff.kind is BackoffKind.NONE:
        assert d == big == 0.0
        return
    for value, ceiling in ((d, c), (big, backoff.ceiling(1000))):
        assert math.isfinite(value)
        match backoff.jitter:
            case Jitter.NONE:
                assert value == ceiling
            case Jitter.FULL:
                assert 0.0 <= value <= ceiling
            case Jitter.EQUAL:
                assert ceiling / 2 <= value <= ceiling
            case Jitter.DECORRELATED:
                p = backoff.base if previous is None else max(previous, backoff.base)
                assert backoff.base <= value <= min(backoff.cap, 3 * p)


def _capped_uniform_mean(lo: float, hi: float, cap: float) -> float:
    """E[min(cap, U(lo, hi))] for lo <= cap."""
    if hi <= cap:
        return (lo + hi) / 2
    return ((cap * cap - lo * lo) / 2 + (hi - cap) * cap) / (hi - lo)


@pytest.mark.parametrize(
    ("jitter", "k", "previous", "expected"),
    [
        (Jitter.FULL, 1, None, 0.1 / 2),
        (Jitter.FULL, 5, None, 1.6 / 2),
        (Jitter.FULL, 60, None, 30.0 / 2),
        (Jitter.EQUAL, 1, None, 3 * 0.1 / 4),
        (Jitter.EQUAL, 5, None, 3 * 1.6 / 4),
        (Jitter.EQUAL, 60, None, 3 * 30.0 / 4),
        (Jitter.DECORRELATED, 1, None, (0.1 + 0.3) / 2),  # previous defaults to base
        (Jitter.DECORRELATED, 7, 0.4, (0.1 + 1.2) / 2),  # the docstring's 0.65 s
        (Jitter.DECORRELATED, 2, 5.0, (0.1 + 15.0) / 2),
        (Jitter.DECORRELATED, 3, 20.0, _capped_uniform_mean(0.1, 60.0, 30.0)),  # cap bites
        (Jitter.DECORRELATED, 3, 100.0, _capped_uniform_mean(0.1, 300.0, 30.0)),
    ],
)
def test_mean_over_many_seeded_samples_matches_the_formula(
    jitter: Jitter, k: int, previous: float | None, expected: float
) -> None:
    b = Backoff(jitter=jitter)  # exponential, base 0.1, multiplier 2, cap 30
    rng = random.Random(20240501)
    mean = sum(b.delay(k, rng, previous) for _ in range(N_SAMPLES)) / N_SAMPLES
    assert mean == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("jitter", list(Jitter))
def test_same_seed_same_sequence(jitter: Jitter) -> None:
    def run(seed: int) -> list[float]:
        b, rng, prev, out = Backoff(jitter=jitter), random.Random(seed), None, []
        for k in range(1, 40):
            prev = b.delay(k, rng, prev)
            out.append(prev)
        return out

    assert run(42) == run(42)
    if jitter is not Jitter.NONE:
        assert run(42) != run(43)


def test_full_jitter_is_random_uniform_draw_for_draw() -> None:
    b, c = Backoff(jitter=Jitter.FULL), Backoff().ceiling(6)
    r1, r2 = random.Random(9), random.Random(9)
    assert [b.delay(6, r1) for _ in range(50)] == [r2.uniform(0, c) for _ in range(50)]


def test_decorrelated_sequence_stays_within_base_and_cap() -> None:
    b = Backoff(jitter=Jitter.DECORRELATED, base=0.5, cap=8.0)
    rng, prev = random.Random(5), None
    seen = []
    for k in range(1, 500):
        prev = b.delay(k, rng, prev)
        seen.append(prev)
    assert min(seen) >= 0.5 and max(seen) == 8.0  # reaches the cap and stays bounded
    assert b.delay(1, random.Random(0), previous=0.0) >= 0.5  # a too-small previous -> base


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Backoff(base=1.0, cap=0.1), "Backoff.cap must be >= base (got cap=0.1, base=1.0)"),
        (lambda: Backoff(base=-0.5), "Backoff.base must be a finite number >= 0.0 (got -0.5)"),
        (lambda: Backoff(base=math.nan), "Backoff.base must be a finite number >= 0.0 (got nan)"),
        (lambda: Backoff(cap=math.inf), "Backoff.cap must be >= base (got cap=inf, base=0.1)"),
        (lambda: Backoff(multiplier=0.5), "Backoff.multiplier must be a finite number >= 1.0"),
        (lambda: Backoff(kind="linear"), "'linear' is not a valid BackoffKind"),  # type: ignore[arg-type]
        (lambda: Backoff(jitter="half"), "'half' is not a valid Jitter"),  # type: ignore[arg-type]
        (
            lambda: RetryPolicy(max_retry=-1),
            "RetryPolicy.max_retry must be an integer >= 0 (got -1)",
        ),
        (lambda: RetryPolicy(max_retry=2.5), "(got 2.5)"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(retryable="timeout"), "must be a set of error kinds, got 'timeout'"),  # type: ignore[arg-type]
        (
            lambda: RetryBudget(ratio=-0.1),
            "RetryBudget.ratio must be a finite number >= 0.0 (got -0.1)",
        ),
        (
            lambda: RetryBudget(window_s=0),
            "RetryBudget.window_s must be a finite number > 0 (got 0)",
        ),
        (lambda: RetryBudget(min_per_s=math.nan), "RetryBudget.min_per_s must be a finite number"),
    ],
)
def test_constructors_validate(make: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        make()  # type: ignore[operator]
    assert message in str(info.value)


def test_strings_from_config_become_enums_and_sets_become_frozensets() -> None:
    b = Backoff(kind="fixed", jitter="equal")  # type: ignore[arg-type]
    assert b.kind is BackoffKind.FIXED and b.jitter is Jitter.EQUAL
    p = RetryPolicy(retryable={"my_flaky"}, fatal=["nope"])  # type: ignore[arg-type]
    assert p.retryable == frozenset({"my_flaky"}) and isinstance(p.fatal, frozenset)
    hash(p)  # still a value
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_retry = 9  # type: ignore[misc]


def test_defaults() -> None:
    assert {"timeout", "connection_reset", "http_429", "http_503"} == RETRYABLE_DEFAULT
    assert {"bad_params", "business_rule", "http_401"} == FATAL_DEFAULT
    p = RetryPolicy()
    assert (p.max_retry, p.unknown_retryable, p.retry_timeouts) == (3, True, True)
    assert p.backoff == Backoff(BackoffKind.EXPONENTIAL, 0.1, 30.0, 2.0, Jitter.FULL)
    assert ErrorKind.HTTP_503 == "http_503" and str(ErrorKind.ORPHANED) == "orphaned"


# --- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kind", "retryable"),
    [
        (RetryPolicy(), ErrorKind.TIMEOUT, True),
        (RetryPolicy(), ErrorKind.CONNECTION_RESET, True),
        (RetryPolicy(), ErrorKind.HTTP_429, True),
        (RetryPolicy(), ErrorKind.HTTP_503, True),
        (RetryPolicy(), "http_503", True),  # plain strings and the enum are interchangeable
        (RetryPolicy(), ErrorKind.BAD_PARAMS, False),
        (RetryPolicy(), ErrorKind.BUSINESS_RULE, False),
        (RetryPolicy(), ErrorKind.HTTP_401, False),
        (RetryPolicy(), "http_401", False),
        # fatal beats retryable
        (RetryPolicy(fatal=FATAL_DEFAULT | {"http_429"}), ErrorKind.HTTP_429, False),
        (RetryPolicy(retryable=RETRYABLE_DEFAULT | {"http_401"}), ErrorKind.HTTP_401, False),
        # user-declared kinds
        (
            RetryPolicy(retryable=frozenset({"gateway_flap"}), unknown_retryable=False),
            "gateway_flap",
            True,
        ),
        (RetryPolicy(fatal=frozenset({"sku_gone"})), "sku_gone", False),
        (RetryPolicy(fatal=frozenset({"sku_gone"})), ErrorKind.HTTP_401, True),  # replaced set
        # unknown kinds follow unknown_retryable
        (RetryPolicy(), "weird_new_error", True),
        (RetryPolicy(), ErrorKind.BREAKER_OPEN, True),
        (RetryPolicy(unknown_retryable=False), "weird_new_error", False),
        (RetryPolicy(unknown_retryable=False), ErrorKind.ORPHANED, False),
        (RetryPolicy(unknown_retryable=False), ErrorKind.TIMEOUT, True),
    ],
)
def test_classification(policy: RetryPolicy, kind: str, retryable: bool) -> None:
    assert policy.is_retryable(kind) is retryable
    decision = policy.decide(0, kind, random.Random(0))
    assert decision.retry is retryable
    if not retryable:
        assert decision == RetryDecision(False, 0.0, f"not retryable: {str(kind)!r}")


# --- decide -------------------------------------------------------------------------------------


def test_decide_counts_retries_until_exhausted() -> None:
    p = RetryPolicy(max_retry=3, backoff=Backoff(jitter=Jitter.NONE))
    rng = random.Random(0)
    delays = []
    for retry_count in range(3):
        d = p.decide(retry_count, ErrorKind.HTTP_503, rng)
        assert d.retry and d.reason.startswith(
            f"retryable 'http_503', retry {retry_count + 1} of 3"
        )
        delays.append(d.delay)
    assert delays == pytest.approx([0.1, 0.2, 0.4])
    assert p.decide(3, ErrorKind.HTTP_503, rng) == RetryDecision(
        False, 0.0, "attempts exhausted (3 retries)"
    )
    assert not p.decide(7, ErrorKind.TIMEOUT, rng).retry
    assert not RetryPolicy(max_retry=0).decide(0, ErrorKind.TIMEOUT, rng).retry


def test_decide_reason_format_and_delay_from_the_backoff() -> None:
    p = RetryPolicy()
    d = p.decide(1, ErrorKind.HTTP_503, random.Random(3))
    expected = Backoff().delay(2, random.Random(3))
    assert d.delay == expected and 0.0 <= d.delay <= 0.2
    assert d.reason == f"retryable 'http_503', retry 2 of 3 in {expected:.3f}s"


def test_decide_passes_previous_delay_to_decorrelated_jitter() -> None:
    p = RetryPolicy(max_retry=100, backoff=Backoff(jitter=Jitter.DECORRELATED, cap=1e6))
    rng = random.Random(11)
    d = p.decide(4, "timeout", rng, previous_delay=1000.0)
    assert 0.1 <= d.delay <= 3000.0 and d.delay > 3.0  # far above anything base*3 allows


def test_decide_timeout_uses_retry_timeouts_only() -> None:
    rng = random.Random(0)
    no = RetryPolicy(retry_timeouts=False)
    d = no.decide_timeout(0, rng)
    assert not d.retry and d.delay == 0.0 and "retry_timeouts=False" in d.reason
    # classification is not consulted: even with "timeout" declared fatal, the flag rules
    yes = RetryPolicy(fatal=frozenset({"timeout"}), backoff=Backoff(jitter=Jitter.NONE))
    d = yes.decide_timeout(1, rng)
    assert d.retry and d.delay == pytest.approx(0.2)
    assert d.reason.startswith("retryable 'timeout', retry 2 of 3")
    assert yes.decide_timeout(3, rng).reason == "attempts exhausted (3 retries)"


def test_decide_draws_from_rng_only_when_retrying() -> None:
    p = RetryPolicy()
    rng = random.Random(4)
    state = rng.getstate()
    p.decide(0, ErrorKind.HTTP_401, rng)
    p.decide(3, ErrorKind.HTTP_503, rng)
    budget = RetryBudget(ratio=0.0, min_per_s=0.0)
    assert p.decide(0, ErrorKind.HTTP_503, rng, budget=budget).reason == "retry budget exhausted"
    assert rng.getstate() == state


# --- budget -------------------------------------------------------------------------------------


def test_budget_allows_ratio_of_first_attempts_plus_the_minimum() -> None:
    budget = RetryBudget(ratio=0.1, window_s=10.0, min_per_s=1.0)
    for i in range(1000):  # 1000 first attempts spread over 5 s
        budget.record_first(i * 0.005)
    allowed = 0
    now = 5.0
    while budget.spend(now):
        allowed += 1
        now += 0.001
    assert allowed == 100 + 10  # 0.1 x 1000 + 1/s x 10 s
    assert budget.counts(now) == (1000, 110)


def test_budget_refills_after_the_window_passes() -> None:
    budget = RetryBudget(ratio=0.1, window_s=10.0, min_per_s=0.0)
    for _ in range(100):
        budget.record_first(1.0)
    for _ in range(10):
        assert budget.can_retry(1.0)
        assert budget.spend(1.0)
    assert not budget.can_retry(1.0)
    assert not budget.spend(1.0)  # a refused spend charges nothing
    assert not budget.can_retry(9.9)  # still inside the window
    for _ in range(100):  # fresh first attempts earn fresh budget
        budget.record_first(9.9)
    assert budget.can_retry(9.9)
    assert budget.counts(11.0) == (100, 0)  # everything from t=1 has left the window
    assert budget.counts(30.0) == (0, 0)


def test_quiet_system_can_still_retry_at_min_per_s() -> None:
    budget = RetryBudget(ratio=0.1, window_s=10.0, min_per_s=0.5)
    assert (budget.ratio, budget.window_s, budget.min_per_s) == (0.1, 10.0, 0.5)
    with pytest.raises(AttributeError):
        budget.window_s = 1.0  # type: ignore[misc]
    allowed = 0
    while budget.spend(3.0):
        allowed += 1
    assert allowed == 5
    assert budget.can_retry(13.0)  # the window moved on


def test_budget_time_going_backwards_stays_in_the_current_bucket() -> None:
    budget = RetryBudget(ratio=1.0, window_s=1.0, min_per_s=0.0)
    budget.record_first(100.0)
    assert budget.spend(3.0)  # counted now, not 97 s ago
    assert budget.counts(100.0) == (1, 1)
    assert not budget.can_retry(50.0)
    budget.record_first(math.nan)
    assert budget.counts(100.0) == (2, 1)


@settings(max_examples=examples(100))
@given(
    ratio=st.floats(min_value=0.0, max_value=1.0),
    window=st.floats(min_value=0.5, max_value=20.0),
    min_per_s=st.floats(min_value=0.0, max_value=2.0),
    events=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=3.0), st.booleans()), max_size=200
    ),
)
def test_budget_matches_a_naive_bucketed_count(
    ratio: float, window: float, min_per_s: float, events: list[tuple[float, bool]]
) -> None:
    """Against a brute-force model: an attempt at t is in the window at `now` iff its bucket
    floor(t/w) is one of the last 10 buckets up to floor(now/w), with w = window/10."""
    budget = RetryBudget(ratio, window, min_per_s)
    w = window / 10
    log: list[tuple[int, bool]] = []
    now = 0.0
    for gap, first in events:
        now += gap
        head = math.floor(now / w)
        in_window = [f for b, f in log if b > head - 10]
        firsts, retries = sum(in_window), len(in_window) - sum(in_window)
        assert budget.counts(now) == (firsts, retries)
        assert budget.can_retry(now) == (retries + 1 <= ratio * firsts + min_per_s * window)
        if first or budget.can_retry(now):
            if first:
                budget.record_first(now)
            else:
                assert budget.spend(now)
            log.append((head, first))
            if not first:  # the bound a budget exists for holds right after each retry
                f, r = budget.counts(now)
                assert r <= ratio * f + min_per_s * window


def test_simultaneous_failures_are_charged_when_decided() -> None:
    """1,000 failures at the same instant under ratio 0.1: exactly the budget retries, not
    one per failure (each decision sees the retries decided before it)."""
    budget = RetryBudget(ratio=0.1, window_s=10.0, min_per_s=0.0)
    for _ in range(1000):
        budget.record_first(1.0)
    policy = RetryPolicy(max_retry=3, backoff=Backoff(BackoffKind.NONE))
    rng = random.Random(0)
    decided = [policy.decide(0, ErrorKind.HTTP_503, rng, None, budget, 1.0) for _ in range(1000)]
    assert sum(d.retry for d in decided) == 100
    assert decided[100].reason == "retry budget exhausted"


def test_token_budget_empties_under_failure_and_refills_from_successes() -> None:
    tokens = RetryTokens(capacity=10, cost=5, refund=1)
    assert tokens.spend(0.0) and tokens.spend(0.0)
    assert not tokens.spend(0.0) and tokens.tokens == 0.0
    tokens.record_first(0.0)  # first attempts earn nothing
    assert not tokens.can_retry(0.0)
    for _ in range(4):
        tokens.record_outcome(0.0, ok=True)
        tokens.record_outcome(0.0, ok=False)  # failures refund nothing
    assert not tokens.can_retry(0.0)
    tokens.record_outcome(0.0, ok=True)
    assert tokens.spend(0.0) and tokens.tokens == 0.0
    for _ in range(50):
        tokens.record_outcome(0.0, ok=True)
    assert tokens.tokens == 10.0  # never above the capacity


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RetryTokens(capacity=0), "RetryTokens.capacity must be a finite number > 0"),
        (lambda: RetryTokens(cost=math.inf), "RetryTokens.cost must be a finite number > 0"),
        (lambda: RetryTokens(refund=-1), "RetryTokens.refund must be a finite number >= 0.0"),
    ],
)
def test_token_budget_refuses_bad_numbers(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()
