"""Tests for taskfuse.core.adaptive: bounds, AIMD, Gradient2, Vegas, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskfuse.core.adaptive import AIMD, AdaptiveLimit, Gradient2, Vegas, make_adaptive
from tests.scale import examples

KINDS = ["aimd", "gradient2", "vegas"]

samples = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=2.0),  # time advance
        st.floats(min_value=0.0, max_value=5.0),  # latency
        st.booleans(),  # ok
        st.integers(min_value=0, max_value=300),  # in flight
    ),
    max_size=150,
)


@settings(max_examples=examples(60))
@given(
    kind=st.sampled_from(KINDS),
    bounds=st.tuples(st.integers(1, 50), st.integers(0, 100)),
    pick=st.floats(0.0, 1.0),
    stream=samples,
)
def test_bounds_always_hold(
    kind: str,
    bounds: tuple[int, int],
    pick: float,
    stream: list[tuple[float, float, bool, int]],
) -> None:
    lo, span = bounds
    hi = lo + span
    initial = lo + int(pick * span)
    lim = make_adaptive(kind, initial, lo, hi)
    assert isinstance(lim, AdaptiveLimit)
    now = 0.0
    for dt, latency, ok, in_flight in stream:
        now += dt
        out = lim.on_sample(now, latency, ok, in_flight)
        assert isinstance(out, int)
        assert out == lim.limit
        assert lo <= out <= hi


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic(kind: str) -> None:
    def run() -> list[int]:
        lim = make_adaptive(kind, 20, 1, 100)
        out = []
        for i in range(500):
            latency = 0.1 + 0.05 * ((i * 7919) % 13) / 13 + (0.3 if 200 <= i < 260 else 0.0)
            out.append(lim.on_sample(i * 0.01, latency, i % 37 != 0, 20))
        return out

    first = run()
    assert first == run()
    assert len(set(first)) > 1  # it did move


# -- AIMD -------------------------------------------------------------------------------------


def test_aimd_decreases_on_error_and_recovers_additively() -> None:
    a = AIMD(20, min_limit=2, max_limit=22, backoff_ratio=0.9, cooldown_s=1.0)
    assert a.on_sample(0.0, 0.1, False, 20) == 18  # floor(20 * 0.9)
    limits = [a.on_sample(0.0, 0.1, True, 18) for _ in range(18)]
    assert limits[:17] == [18] * 17 and limits[17] == 19  # one window of 18 good samples
    limits = [a.on_sample(0.0, 0.1, True, 19) for _ in range(19 + 20 + 22)]
    assert limits[18] == 20 and limits[38] == 21 and limits[60] == 22
    for _ in range(100):
        a.on_sample(0.0, 0.1, True, 22)
    assert a.limit == 22  # bounded by max_limit


def test_aimd_cooldown_allows_one_decrease_per_period() -> None:
    a = AIMD(100, cooldown_s=1.0, backoff_ratio=0.5)
    assert a.on_sample(10.0, 0.1, False, 100) == 50
    assert a.on_sample(10.5, 0.1, False, 100) == 50  # same episode
    assert a.on_sample(10.99, 0.1, False, 100) == 50
    assert a.on_sample(11.0, 0.1, False, 100) == 25
    for t in range(12, 30):
        a.on_sample(float(t), 0.1, False, 100)
    assert a.limit == 1  # floor at min_limit


def test_aimd_latency_threshold_counts_as_overload_and_resets_window() -> None:
    a = AIMD(4, latency_threshold_s=0.5, cooldown_s=0.0)
    for _ in range(3):
        a.on_sample(0.0, 0.5, True, 4)  # exactly at the threshold is fine
    assert a.on_sample(0.0, 0.6, True, 4) == 3  # slow: floor(4 * 0.9)
    assert [a.on_sample(0.0, 0.1, True, 3) for _ in range(3)] == [3, 3, 4]


def test_aimd_bad_sample_restarts_the_good_window() -> None:
    a = AIMD(3, cooldown_s=100.0)
    a.on_sample(0.0, 0.1, False, 3)  # 3 -> 2
    a.on_sample(0.0, 0.1, True, 2)
    a.on_sample(1.0, 0.1, False, 2)  # in cooldown: no decrease, but the window restarts
    assert a.limit == 2
    assert [a.on_sample(1.0, 0.1, True, 2) for _ in range(2)] == [2, 3]


# -- Gradient2 --------------------------------------------------------------------------------


def test_gradient2_shrinks_when_latency_rises_and_grows_back() -> None:
    g = Gradient2(50, min_limit=5, max_limit=60)
    t = 0.0
    for _ in range(200):  # steady at 0.1 s: probes upwards to max
        t += 0.01
        g.on_sample(t, 0.1, True, 60)
    assert g.limit == 60
    assert g.long_rtt == pytest.approx(0.1)
    history = []
    for _ in range(30):  # short-term latency triples
        t += 0.01
        history.append(g.on_sample(t, 0.3, True, 60))
    assert history == sorted(history, reverse=True)
    assert g.limit < 25
    assert g.long_rtt < 0.15  # the long average barely moved
    low = g.limit
    for _ in range(30):  # latency falls back
        t += 0.01
        g.on_sample(t, 0.1, True, 60)
    assert g.limit > low + 15


def test_gradient2_worked_number() -> None:
    g = Gradient2(50, max_limit=200)
    for _ in range(10):
        g.on_sample(0.0, 0.1, True, 0)  # app-limited: averages move, the limit does not
    assert g.limit == 50
    assert g.on_sample(0.0, 0.3, True, 50) == 46
    g2 = Gradient2(50, max_limit=200)
    assert g2.on_sample(0.0, 0.1, True, 50) == 51


def test_gradient2_app_limited_and_errors() -> None:
    g = Gradient2(40)
    assert g.on_sample(0.0, 0.1, True, 19) == 40  # in flight < 40 / 2: unchanged
    # An error is congestion (gradient 0.5): 40 * 0.8 + (40 * 0.5 + sqrt(40)) * 0.2 = 37.26
    assert g.on_sample(0.0, 0.001, False, 40) == 37
    assert g.long_rtt == pytest.approx(0.1)  # the fast error did not drag the average down


def test_gradient2_zero_latency_is_ignored() -> None:
    g = Gradient2(10)
    assert g.on_sample(0.0, 0.0, True, 10) == 10
    assert g.long_rtt == 0.0


# -- Vegas ------------------------------------------------------------------------------------


def test_vegas_worked_number_and_growth() -> None:
    v = Vegas(20)
    assert v.on_sample(0.0, 0.1, True, 20) == 20  # first sample sets rtt_noload
    assert v.rtt_noload == 0.1
    assert v.on_sample(0.0, 0.2, True, 20) == 18  # queue 10 > beta 7.8: 20 - 1.3
    v2 = Vegas(20)
    v2.on_sample(0.0, 0.1, True, 20)
    assert v2.on_sample(0.0, 0.1, True, 20) == 27  # no queue: + beta 7.8
    assert v2.on_sample(0.0, 0.1, True, 2) == 27  # app-limited
    assert v2.on_sample(0.0, 0.1, False, 2) == 26  # an error: - log10(27.8)


# -- factory and validation -------------------------------------------------------------------


def test_make_adaptive_kinds_and_options() -> None:
    a = make_adaptive("aimd", 10, 2, 50, backoff_ratio=0.5)
    assert isinstance(a, AIMD) and a.backoff_ratio == 0.5 and a.min_limit == 2
    assert isinstance(make_adaptive("gradient2", 10, 1, 50, tolerance=2.0), Gradient2)
    assert isinstance(make_adaptive("vegas", 10, 1, 50), Vegas)
    with pytest.raises(ValueError, match="'reno'"):
        make_adaptive("reno", 10, 1, 50)
    with pytest.raises(TypeError):
        make_adaptive("aimd", 10, 1, 50, smoothing=0.2)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"initial": 0}, "initial must be an integer >= 1, got 0"),
        ({"min_limit": 5, "max_limit": 4, "initial": 4}, "min_limit 5 must be <= max_limit 4"),
        ({"initial": 300}, r"initial 300 must be within \[min_limit, max_limit\] = \[1, 200\]"),
        ({"backoff_ratio": 1.0}, "backoff_ratio must be < 1, got 1.0"),
        ({"backoff_ratio": 0}, r"backoff_ratio must be a number in \(0, 1\], got 0"),
        ({"cooldown_s": -1}, "cooldown_s must be .*, got -1"),
        ({"increase": 0}, "increase must be an integer >= 1, got 0"),
        ({"latency_threshold_s": 0.0}, "latency_threshold_s must be .*, got 0.0"),
    ],
)
def test_aimd_validation(kw: dict[str, object], msg: str) -> None:
    args: dict[str, object] = {"initial": 10, **kw}
    with pytest.raises(ValueError, match=msg):
        AIMD(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"smoothing": 0.0}, "smoothing"),
        ({"long_window": 0}, "long_window"),
        ({"tolerance": 0.9}, "tolerance"),
    ],
)
def test_gradient2_validation(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        Gradient2(10, **kw)  # type: ignore[arg-type]
