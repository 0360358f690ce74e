"""The capacity rules both drivers apply (taskfuse.core.capacity), by worked numbers."""

from __future__ import annotations

from taskfuse.core.capacity import claim_room, claim_want, replaces_stuck, retires_on_return


def test_stuck_workers_are_replaced_up_to_the_bound_and_retire_into_a_full_pool() -> None:
    assert [replaces_stuck(n, 2) for n in (1, 2, 3)] == [True, True, False]
    assert not replaces_stuck(1, 0)  # bound 0: a stuck worker shrinks the pool
    # 4 workers, one replaced while stuck: 5 serve once it returns, so it retires
    assert retires_on_return(5, 4) and not retires_on_return(4, 4)


def test_a_claims_room_under_bulkheads() -> None:
    assert claim_room({}, {}, 2.0) == (frozenset(), None)
    # the module doc's number: 14 + 14 x 2 - 30 = 12
    assert claim_room({"partner": 14}, {"partner": 30}, 2.0) == (frozenset(), 12)
    full, room = claim_room({"a": 2, "b": 10}, {"a": 2, "b": 3}, 0.0)
    assert (full, room) == (frozenset({"a"}), 7)
    assert claim_room({"a": 1}, {"a": 5}, 0.0) == (frozenset({"a"}), None)


def test_a_claims_want_for_worker_threads() -> None:
    # the module doc's number: 4 + 8 - (5 + 4 + (10 - 8)) = 1
    assert claim_want(4, 8, 5, 4, 10) == 1
    assert claim_want(4, 8, 0, 0, 8) == 12  # outcomes within the prefetch hold nothing
    assert claim_want(4, 0, 0, 4, 1) == -1  # no prefetch: a thread is free once committed
    assert claim_want(1, 2, 0, 0, 0) == 3  # a lab worker with claim_batch 3: it claims 3
