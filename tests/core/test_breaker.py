"""Tests for taskfuse.core.breaker: state table per window kind, probes, windows, listener."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskfuse.core.breaker import (
    BreakerChange,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    WindowKind,
)
from tests.scale import examples

CL, OP, HO = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def make(**kw: object) -> tuple[CircuitBreaker, list[BreakerChange]]:
    changes: list[BreakerChange] = []
    cb = CircuitBreaker(BreakerConfig(**kw), name="b", listener=changes.append)  # type: ignore[arg-type]
    return cb, changes


def ch(at: float, src: BreakerState, dst: BreakerState, reason: str) -> BreakerChange:
    return BreakerChange("b", at, src, dst, reason)


# Each step: the driver asks allow(now) and, if let through, records (now, ok); then the state
# is checked. Refused calls are simply not recorded.
TABLE = [
    pytest.param(
        {
            "window": WindowKind.COUNT,
            "window_size": 4,
            "minimum_calls": 3,
            "open_wait_s": 5.0,
            "half_open_probes": 2,
        },
        [
            (0.0, True, CL),
            (1.0, False, CL),  # 2 calls < minimum 3
            (2.0, True, CL),  # 1/3
            (3.0, False, OP),  # 2/4 = 0.50 >= 0.50
            (4.0, False, OP),  # refused
            (8.0, True, HO),  # open wait elapsed at 8.0; probe 1 ok
            (8.5, False, OP),  # probe 2 failed: 1/2 >= 0.5
            (13.5, True, HO),
            (14.0, True, CL),  # 2/2 probes ok
            (15.0, False, CL),  # window was cleared: 1 call
            (16.0, False, CL),
            (17.0, False, OP),  # 3/3
        ],
        [
            ch(3.0, CL, OP, "failure rate 0.50 >= 0.50 over 4 calls"),
            ch(8.0, OP, HO, "open wait 5.0s elapsed"),
            ch(8.5, HO, OP, "1/2 probes failed (0.50 >= 0.50)"),
            ch(13.5, OP, HO, "open wait 5.0s elapsed"),
            ch(14.0, HO, CL, "2/2 probes ok"),
            ch(17.0, CL, OP, "failure rate 1.00 >= 0.50 over 3 calls"),
        ],
        id="count-cycle",
    ),
    pytest.param(
        {"window": WindowKind.COUNT, "window_size": 4, "minimum_calls": 4, "failure_rate": 0.75},
        [
            (0.0, False, CL),
            (1.0, False, CL),
            (2.0, True, CL),
            (3.0, True, CL),  # F F T T: 0.50
            (4.0, False, CL),  # evicts F: F T T F 0.50
            (5.0, False, CL),  # evicts F: T T F F 0.50
            (6.0, False, OP),  # evicts T: T F F F 0.75
        ],
        [ch(6.0, CL, OP, "failure rate 0.75 >= 0.75 over 4 calls")],
        id="count-ring-evicts",
    ),
    pytest.param(
        {
            "window": WindowKind.TIME,
            "window_size": 10,
            "minimum_calls": 3,
            "open_wait_s": 5.0,
            "half_open_probes": 1,
        },
        [
            (0.0, False, CL),
            (1.0, False, CL),
            (11.0, True, CL),  # both failures are more than 10 s old: 1 call in the window
            (12.0, False, CL),
            (13.0, False, OP),  # 2/3
            (17.9, True, OP),  # refused: reopens at 18.0
            (18.0, True, CL),  # half-open at 18.0, the single probe ok
        ],
        [
            ch(13.0, CL, OP, "failure rate 0.67 >= 0.50 over 3 calls in 10s"),
            ch(18.0, OP, HO, "open wait 5.0s elapsed"),
            ch(18.0, HO, CL, "1/1 probes ok"),
        ],
        id="time-forgets-then-trips",
    ),
    pytest.param(
        {"window": WindowKind.TIME, "window_size": 10, "minimum_calls": 3},
        [
            (0.0, False, CL),
            (5.0, False, CL),
            (9.9, True, OP),  # all within 10 s: 2/3 (a success can complete the verdict)
        ],
        [ch(9.9, CL, OP, "failure rate 0.67 >= 0.50 over 3 calls in 10s")],
        id="time-within-window",
    ),
    pytest.param(
        {
            "window": WindowKind.TIME,
            "window_size": 60,
            "minimum_calls": 2,
            "failure_rate": 1.0,
            "half_open_probes": 3,
            "open_wait_s": 1,
        },
        [
            (100.0, False, CL),
            (100.2, False, OP),  # same 1 s bucket
            (101.1, False, OP),  # refused: reopens at 101.2
            (101.2, False, HO),  # probe 1 failed
            (101.3, True, HO),  # probe 2 ok
            (101.4, True, CL),  # 2/3 ok: 0.33 < 1.0
        ],
        [
            ch(100.2, CL, OP, "failure rate 1.00 >= 1.00 over 2 calls in 60s"),
            ch(101.2, OP, HO, "open wait 1.0s elapsed"),
            ch(101.4, HO, CL, "2/3 probes ok (1 failed: 0.33 < 1.00)"),
        ],
        id="time-buckets-and-mixed-probes",
    ),
]


@pytest.mark.parametrize(("config", "steps", "expected_changes"), TABLE)
def test_state_table(
    config: dict[str, object],
    steps: list[tuple[float, bool, BreakerState]],
    expected_changes: list[BreakerChange],
) -> None:
    cb, changes = make(**config)
    for i, (now, ok, expected) in enumerate(steps):
        if cb.allow(now):
            cb.record(now, ok)
        assert cb.state(now) is expected, f"step {i} at t={now}"
    assert changes == expected_changes


def test_minimum_calls_respected() -> None:
    cb, changes = make(minimum_calls=10, window_size=20)
    for t in range(9):
        cb.record(float(t), False)
    assert cb.state(9.0) is CL and changes == []
    cb.record(9.0, False)
    assert cb.state(9.0) is OP
    assert changes == [ch(9.0, CL, OP, "failure rate 1.00 >= 0.50 over 10 calls")]
    assert cb.opens == 1


def trip(cb: CircuitBreaker, now: float = 0.0) -> None:
    for _ in range(cb.config.minimum_calls):
        cb.record(now, False)
    assert cb.state(now) is OP


def test_half_open_probe_accounting() -> None:
    cb, _ = make(half_open_probes=3, open_wait_s=5.0)
    trip(cb)
    assert cb.reopen_at() == 5.0
    assert not cb.allow(4.99)
    assert [cb.allow(5.0) for _ in range(4)] == [True, True, True, False]
    assert cb.reopen_at() is None
    assert cb.blocks(5.0)
    cb.release_probe()  # one probe never made its call
    assert not cb.blocks(5.0)
    assert cb.allow(5.0)
    assert not cb.allow(5.0)


def test_release_probe_is_a_noop_without_an_outstanding_probe() -> None:
    cb, _ = make(half_open_probes=2)
    assert not cb.release_probe()  # CLOSED: the call was not a probe
    trip(cb)
    assert not cb.release_probe()  # OPEN
    assert cb.allow(10.0)
    assert cb.release_probe()  # gives the one probe back
    assert cb.allow(10.0) and cb.allow(10.0)
    cb.record(10.0, True)
    assert cb.release_probe()  # one still out
    assert not cb.release_probe()  # a double release changes nothing
    assert cb.allow(10.0)
    cb.record(10.1, True)
    assert cb.state(10.1) is CL


def test_failed_probes_reopen_and_all_ok_closes() -> None:
    cb, changes = make(half_open_probes=3, open_wait_s=2.0)
    trip(cb)
    for _ in range(3):
        assert cb.allow(2.0)
    cb.record(2.1, False)
    cb.record(2.2, False)
    assert cb.state(2.2) is HO  # all probes must finish
    cb.record(2.3, True)
    assert cb.state(2.3) is OP
    assert cb.opens == 2
    assert cb.reopen_at() == 4.3
    for _ in range(3):
        assert cb.allow(4.3)
    for t in (4.4, 4.5, 4.6):
        cb.record(t, True)
    assert cb.state(4.6) is CL
    assert [(c.src, c.dst) for c in changes] == [(CL, OP), (OP, HO), (HO, OP), (OP, HO), (HO, CL)]
    assert changes[2].reason == "2/3 probes failed (0.67 >= 0.50)"
    assert changes[-1].reason == "3/3 probes ok"
    assert cb.window_calls == 0  # windows reset on closing


def test_late_results_while_open_are_ignored() -> None:
    cb, changes = make(minimum_calls=2, window_size=2, open_wait_s=5.0, half_open_probes=1)
    assert cb.allow(0.0) and cb.allow(0.0) and cb.allow(0.0)  # three calls in flight
    cb.record(1.0, False)
    cb.record(1.0, False)
    assert cb.state(1.0) is OP
    cb.record(2.0, True)  # the third, late: ignored
    assert cb.state(2.0) is OP and len(changes) == 1 and cb.window_calls == 0
    # A late result after the wait elapsed moves it to HALF_OPEN but is not a probe.
    cb.record(6.5, False)
    assert cb.state(6.5) is HO
    assert cb.allow(6.5)
    cb.record(6.6, True)
    assert cb.state(6.6) is CL


def test_time_window_forgets_old_failures() -> None:
    cb, changes = make(window=WindowKind.TIME, window_size=30, minimum_calls=5)
    for t in range(4):
        cb.record(float(t), False)
    assert cb.window_calls == 4
    cb.record(40.0, False)  # the old four are more than 30 s old
    assert cb.window_calls == 1 and cb.window_failures == 1
    assert cb.state(40.0) is CL and changes == []
    for t in (41.0, 42.0, 43.0, 44.0):
        cb.record(t, False)
    assert cb.state(44.0) is OP


def test_time_window_expires_bucket_by_bucket() -> None:
    cb, _ = make(window=WindowKind.TIME, window_size=2, minimum_calls=1, failure_rate=1.0)
    # buckets of 0.1 s, 20 of them
    cb.record(0.05, True)
    cb.record(1.05, True)
    assert cb.window_calls == 2
    cb.record(2.05, True)  # epoch 20: the bucket of 0.05 (epoch 0) expired
    assert cb.window_calls == 2
    cb.record(1.0, True)  # a clock that goes back counts in the newest bucket
    assert cb.window_calls == 3
    cb.record(3.15, True)  # epoch 31: epochs 12..31 remain, so 1.05 (epoch 10) expired
    assert cb.window_calls == 3  # epoch 20 (two records) + 3.15


def test_slow_calls_count_as_failures() -> None:
    cb, changes = make(
        minimum_calls=2, window_size=2, slow_call_s=1.0, half_open_probes=1, failure_rate=1.0
    )
    cb.record(0.0, True, latency=1.0)  # not slower than the threshold
    cb.record(0.0, True, latency=0.5)
    assert cb.state(0.0) is CL
    cb.record(1.0, True, latency=2.0)
    assert cb.state(1.0) is CL  # 1/2 < 1.0
    cb.record(2.0, True, latency=3.0)
    assert cb.state(2.0) is OP
    assert changes[-1].reason == "failure rate 1.00 >= 1.00 over 2 calls"
    assert cb.allow(7.0)
    cb.record(7.5, True, latency=1.5)  # a slow probe fails too
    assert cb.state(7.5) is OP


def test_blocks_never_consumes_a_probe() -> None:
    cb, changes = make(half_open_probes=2, open_wait_s=1.0)
    assert not cb.blocks(0.0)
    trip(cb)
    assert cb.blocks(0.5)
    for _ in range(10):
        assert not cb.blocks(1.0)
    assert len(changes) == 2  # the lazy OPEN -> HALF_OPEN was reported once
    assert cb.allow(1.0) and cb.allow(1.0)
    assert cb.blocks(1.0)
    assert not cb.allow(1.0)


def test_state_moves_lazily_and_reports_once() -> None:
    cb, changes = make(open_wait_s=3.0)
    trip(cb, now=10.0)
    assert cb.state(12.9) is OP
    assert cb.state(13.0) is HO
    assert cb.state(20.0) is HO
    assert changes[-1] == ch(13.0, OP, HO, "open wait 3.0s elapsed")
    assert len(changes) == 2


def test_force_open_and_reset_are_reported() -> None:
    cb, changes = make(open_wait_s=5.0)
    cb.reset(0.0)  # already closed: nothing to report
    cb.force_open(1.0, "maintenance window")
    assert cb.state(1.0) is OP and cb.opens == 1 and cb.reopen_at() == 6.0
    cb.force_open(2.0, "again")  # restarts the wait, no self-change reported
    assert cb.reopen_at() == 7.0
    cb.reset(3.0)
    assert cb.state(3.0) is CL and cb.reopen_at() is None
    assert changes == [ch(1.0, CL, OP, "maintenance window"), ch(3.0, OP, CL, "reset")]


def test_no_listener_and_defaults() -> None:
    cb = CircuitBreaker()
    assert cb.config == BreakerConfig()
    trip(cb)
    assert cb.state(0.0) is OP and cb.opens == 1
    assert "open" in repr(cb)


def test_window_kind_from_string() -> None:
    assert BreakerConfig(window="time", window_size=5).window is WindowKind.TIME  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field", "bad"),
    [
        ({"failure_rate": 0.0}, "failure_rate", 0.0),
        ({"failure_rate": 1.5}, "failure_rate", 1.5),
        ({"failure_rate": float("nan")}, "failure_rate", float("nan")),
        ({"window": "sliding"}, "window", "sliding"),
        ({"window_size": 0}, "window_size", 0),
        ({"window_size": 10.5}, "window_size", 10.5),
        ({"window": WindowKind.TIME, "window_size": float("inf")}, "window_size", float("inf")),
        ({"minimum_calls": 0}, "minimum_calls", 0),
        ({"minimum_calls": 30}, "minimum_calls", 30),  # > COUNT window_size 20
        ({"minimum_calls": True}, "minimum_calls", True),
        ({"open_wait_s": -1}, "open_wait_s", -1),
        ({"half_open_probes": 0}, "half_open_probes", 0),
        ({"slow_call_s": 0}, "slow_call_s", 0),
    ],
)
def test_config_validation_names_field_and_value(
    kw: dict[str, object], field: str, bad: object
) -> None:
    with pytest.raises(ValueError, match=f"BreakerConfig.{field} ") as info:
        BreakerConfig(**kw)  # type: ignore[arg-type]
    assert str(info.value).endswith(f"got {bad!r}")


# -- property test ----------------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["allow", "record", "release", "blocks", "state", "force", "reset"]),
        st.floats(min_value=0.0, max_value=3.0),  # time advance
        st.booleans(),  # ok
        st.floats(min_value=0.0, max_value=2.0),  # latency
    ),
    max_size=60,
)
configs = st.builds(
    BreakerConfig,
    failure_rate=st.sampled_from([0.2, 0.5, 1.0]),
    window=st.sampled_from(list(WindowKind)),
    window_size=st.sampled_from([3, 5, 10]),
    minimum_calls=st.integers(1, 3),
    open_wait_s=st.sampled_from([0.0, 0.5, 2.0]),
    half_open_probes=st.integers(1, 3),
    slow_call_s=st.sampled_from([None, 1.0]),
)


@settings(max_examples=examples(150))
@given(config=configs, steps=ops)
def test_changes_chain_and_state_is_valid(
    config: BreakerConfig, steps: list[tuple[str, float, bool, float]]
) -> None:
    changes: list[BreakerChange] = []
    cb = CircuitBreaker(config, name="p", listener=changes.append)
    now = 0.0
    outstanding = 0  # probes permitted and neither recorded nor released
    for op, dt, ok, latency in steps:
        now += dt
        before = len(changes)
        if op == "allow":
            was = cb.state(now)
            if cb.allow(now) and was is HO:
                outstanding += 1
        elif op == "record":
            cb.record(now, ok, latency)
        elif op == "release":
            if cb.state(now) is HO and outstanding:
                cb.release_probe()
                outstanding -= 1
        elif op == "blocks":
            b = cb.blocks(now)
            assert cb.blocks(now) == b  # asking never consumes a probe
            was = cb.state(now)
            allowed = cb.allow(now)
            assert allowed == (not b)
            if allowed and was is HO:
                outstanding += 1
        elif op == "state":
            cb.state(now)
        elif op == "force":
            cb.force_open(now, "op")
        else:
            cb.reset(now)
        if cb.state(now) is not HO:
            outstanding = 0
        assert cb.state(now) in (CL, OP, HO)
        assert len(changes) - before <= 3
    prev = CL
    for c in changes:
        assert c.src is prev
        assert c.dst is not c.src
        assert c.name == "p"
        prev = c.dst
    assert prev is cb.state(now)
    assert cb.opens == sum(c.dst is OP for c in changes)
