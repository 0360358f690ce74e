"""Tests for taskfuse.core.bulkhead: FIFO hand-off, cancel, resizing, invariants."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskfuse.core.bulkhead import Bulkhead
from tests.scale import examples


def test_grants_up_to_limit_then_queues_fifo() -> None:
    b: Bulkhead[str] = Bulkhead(2, name="partner")
    assert b.try_acquire("a") and b.try_acquire("b")
    assert not b.try_acquire("c")
    assert not b.try_acquire("d")
    assert (b.in_use, b.waiting, b.limit, b.name) == (2, 2, 2, "partner")
    assert b.release() == "c"  # handed directly: in_use unchanged
    assert (b.in_use, b.waiting) == (2, 1)
    assert b.release() == "d"
    assert b.release() is None
    assert b.release() is None
    assert (b.in_use, b.waiting, b.max_in_use) == (0, 0, 2)


def test_release_without_permit_raises() -> None:
    b: Bulkhead[int] = Bulkhead(1, name="db")
    with pytest.raises(RuntimeError, match="'db'"):
        b.release()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_limit_validation_quotes_value(bad: object) -> None:
    with pytest.raises(ValueError, match=f"got {bad!r}$"):
        Bulkhead(bad)  # type: ignore[arg-type]
    b: Bulkhead[int] = Bulkhead(1)
    with pytest.raises(ValueError, match=f"got {bad!r}$"):
        b.set_limit(bad)  # type: ignore[arg-type]


def test_nowait_never_queues_nor_overtakes() -> None:
    b: Bulkhead[str] = Bulkhead(1)
    assert b.try_acquire_nowait()
    assert not b.try_acquire_nowait()
    assert b.waiting == 0
    assert not b.try_acquire("w")
    assert b.release() == "w"
    assert not b.try_acquire_nowait()  # "w" holds it
    assert b.release() is None
    assert b.try_acquire_nowait()


def test_cancel_removes_a_queued_waiter() -> None:
    b: Bulkhead[str] = Bulkhead(1)
    b.try_acquire("a")
    b.try_acquire("b")
    b.try_acquire("c")
    assert b.cancel("b")
    assert not b.cancel("b")
    assert not b.cancel("a")  # holds a permit, not queued
    assert b.waiting == 1
    assert b.release() == "c"
    assert b.release() is None


def test_raising_the_limit_wakes_waiters_in_order() -> None:
    b: Bulkhead[int] = Bulkhead(1)
    b.try_acquire(0)
    for w in range(1, 5):
        assert not b.try_acquire(w)
    assert b.set_limit(3) == [1, 2]
    assert (b.in_use, b.waiting, b.max_in_use) == (3, 2, 3)
    assert b.set_limit(10) == [3, 4]
    assert b.set_limit(10) == []
    assert b.max_in_use == 5


def test_lowering_the_limit_drains_before_waking() -> None:
    b: Bulkhead[str] = Bulkhead(3)
    for w in "abc":
        assert b.try_acquire(w)
    assert not b.try_acquire("x")
    assert b.set_limit(1) == []
    assert b.in_use == 3  # nothing revoked
    assert b.release() is None  # 3 -> 2, still above the limit
    assert b.release() is None  # 2 -> 1, in_use - 1 = 1 is not < 1
    assert b.in_use == 1
    assert b.release() == "x"  # in_use - 1 = 0 < 1: hand it over
    assert (b.in_use, b.waiting) == (1, 0)


def test_repr_mentions_state() -> None:
    assert repr(Bulkhead(4, name="n")) == "Bulkhead(name='n', limit=4, in_use=0, waiting=0)"


# -- property test against a plain model -------------------------------------------------------

actions = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 5)),
        st.tuples(st.just("nowait"), st.just(0)),
        st.tuples(st.just("release"), st.just(0)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("limit"), st.integers(1, 6)),
    ),
    max_size=80,
)


@settings(max_examples=examples(200))
@given(limit=st.integers(1, 4), steps=actions)
def test_invariants_and_fifo_against_model(limit: int, steps: list[tuple[str, int]]) -> None:
    b: Bulkhead[int] = Bulkhead(limit)
    holders = 0  # permits held, as the drivers see them
    queue: deque[int] = deque()  # the model queue
    next_id = 0
    peak = 0
    for op, arg in steps:
        if op == "acquire":
            w = next_id
            next_id += 1
            if b.try_acquire(w):
                holders += 1
            else:
                queue.append(w)
        elif op == "nowait":
            if b.try_acquire_nowait():
                holders += 1
        elif op == "release":
            if holders == 0:
                with pytest.raises(RuntimeError):
                    b.release()
                continue
            woken = b.release()
            if woken is None:
                holders -= 1
            else:
                assert woken == queue.popleft()  # FIFO
        elif op == "cancel":
            assert b.cancel(arg) == (arg in queue)
            if arg in queue:
                queue.remove(arg)
        else:
            woken_list = b.set_limit(arg)
            assert woken_list == [queue.popleft() for _ in woken_list]
            holders += len(woken_list)
        peak = max(peak, holders)
        assert b.in_use == holders
        assert b.waiting == len(queue)
        assert b.max_in_use == peak
        if queue:
            assert b.in_use >= b.limit  # nobody waits while a permit is free
