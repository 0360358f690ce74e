"""Fleet-wide limits on PostgreSQL: a bulkhead and a token bucket shared by processes.

A bulkhead's permits are leases: a holder killed with SIGKILL frees its permit when the lease
lapses (never leaks it), a release wakes waiters in other processes at once, and the limit
holds across processes. The token bucket gives the core TokenBucket's answers fleet-wide.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from taskfuse.store.fleet_limits import (
    FleetBulkhead,
    FleetRateLimiter,
    LimitTimeout,
    per_process_limit,
)
from tests.store import procs
from tests.store.backends import pg_url, postgres_store

CTX = multiprocessing.get_context("spawn")


@pytest.fixture
def store():
    with postgres_store(pool_max=4) as made:
        yield made


def test_per_process_share_rounds_down_and_never_reaches_zero() -> None:
    assert per_process_limit(14, 4) == 3  # 12 in all: under the partner's 14
    assert per_process_limit(100, 4) == 25
    assert per_process_limit(3, 8) == 1
    with pytest.raises(ValueError):
        per_process_limit(0, 2)


def test_bulkhead_hands_out_at_most_limit_permits(store) -> None:
    bulkhead = FleetBulkhead(store, "partner", 3)
    permits = [bulkhead.try_acquire(f"h{i}") for i in range(4)]
    assert [p is not None for p in permits] == [True, True, True, False]
    assert bulkhead.in_use() == 3
    assert bulkhead.release(permits[0])
    assert not bulkhead.release(permits[0])  # a permit is given back once
    assert bulkhead.try_acquire("h4") is not None
    with pytest.raises(LimitTimeout, match="'partner'"), bulkhead.hold("late", timeout=0.2):
        pass


def test_renewal_keeps_a_lease_and_an_expired_lease_is_someone_elses(store) -> None:
    bulkhead = FleetBulkhead(store, "short", 1, lease_s=1.0)
    permit = bulkhead.try_acquire("slow-call")
    time.sleep(0.6)
    renewed = bulkhead.renew(permit)
    assert renewed is not None and renewed.expires_at > permit.expires_at
    time.sleep(0.6)  # past the first lease, inside the renewed one
    assert bulkhead.try_acquire("other") is None
    time.sleep(1.2)
    assert bulkhead.try_acquire("other") is not None  # lapsed: taken over
    assert bulkhead.renew(permit) is None  # the old holder learns it lost the slot


def test_a_killed_holder_never_leaks_its_permit(store) -> None:
    lease = 0.8
    ready = CTX.Queue()
    holder = CTX.Process(target=procs.hold_permit_forever,
                         args=(pg_url(store.schema), "db-api", 1, lease, ready))
    holder.start()
    try:
        assert ready.get(timeout=30) is True
        bulkhead = FleetBulkhead(store, "db-api", 1, lease_s=lease)
        assert bulkhead.try_acquire("survivor") is None
        holder.kill()  # SIGKILL: no release, no cleanup
        holder.join(10)
        killed_at = time.monotonic()
        permit = bulkhead.acquire("survivor", timeout=10.0)
        assert permit is not None
        assert time.monotonic() - killed_at < lease + 3.0
    finally:
        if holder.is_alive():
            holder.kill()


def test_a_release_wakes_a_waiter_in_another_store_at_once(store) -> None:
    from taskfuse.store.postgres import PostgresStore

    other = PostgresStore(pg_url(store.schema), pool_max=2)
    try:
        holder_side = FleetBulkhead(store, "wake", 1, lease_s=30.0)
        waiter_side = FleetBulkhead(other, "wake", 1, lease_s=30.0, poll_s=20.0)
        permit = holder_side.try_acquire("holder")
        got: list[float] = []

        def wait() -> None:
            if waiter_side.acquire("waiter", timeout=10.0) is not None:
                got.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)
        released = time.monotonic()
        holder_side.release(permit)
        thread.join(10)
        assert got and got[0] - released < 3.0  # woken by NOTIFY, not by the 20 s poll
    finally:
        other.close()


def test_the_limit_holds_across_processes(store) -> None:
    spans = CTX.Queue()
    workers = [CTX.Process(target=procs.use_bulkhead,
                           args=(pg_url(store.schema), "shared", 2, 4, 0.05, spans))
               for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    intervals = [spans.get(timeout=5) for _ in range(16)]
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda x: (x[0], x[1]))
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    assert peak == 2  # used fully, never exceeded


def test_token_bucket_answers_like_the_core_one_across_stores(store) -> None:
    from taskfuse.store.postgres import PostgresStore

    other = PostgresStore(pg_url(store.schema), pool_max=2)
    try:
        a = FleetRateLimiter(store, "partner-qps", rate=10.0, burst=2)
        b = FleetRateLimiter(other, "partner-qps", rate=10.0, burst=2)
        assert a.try_acquire() and b.try_acquire()  # the burst, shared
        assert not a.try_acquire() and not b.try_acquire()
        waits = [a.reserve(), b.reserve(), a.reserve()]
        # FIFO, 1/rate apart: 0.1, 0.2, 0.3 s, less the time the calls themselves took
        assert 0.0 < waits[0] <= 0.1
        assert waits[0] < waits[1] < waits[2] <= 0.3
        assert waits[2] - waits[0] == pytest.approx(0.2, abs=0.08)
        started = time.monotonic()
        b.acquire()  # sleeps out its reservation (the 4th: about 0.4 s)
        assert 0.2 <= time.monotonic() - started < 1.5
    finally:
        other.close()
