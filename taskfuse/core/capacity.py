"""Rules about a worker's capacity that every driver applies: one place, pure.

A driver (the threaded runtime, the simulator) keeps its own counts and asks these; neither
computes the rule itself, so a simulated worker replaces, retires and claims exactly as a
real one does.

* Stuck workers. A worker whose attempt was stopped (timeout, cancel) but whose code has not
  returned is stuck: it no longer counts as capacity. A replacement starts while at most
  `bound` workers are stuck (`replaces_stuck`), so there are never more than
  workers + bound of them; when a stuck worker's code returns to a pool that is full without
  it (a replacement took its place), it retires (`retires_on_return`).
* How many attempts a claim for worker threads may bring (`claim_want`): the threads that
  count as capacity plus the tasks claimed ahead of them, less what they hold. Outcomes
  waiting for their commit hold no thread and count only beyond what is claimed ahead, so
  a claim and a commit are in flight at once. Worked number: 4 threads, 8 ahead, 5
  buffered, 4 running, 10 outcomes to commit -> 4 + 8 - (5 + 4 + 2) = 1. A simulated worker
  is the case of one free thread and `claim_batch - 1` ahead: it claims `claim_batch`.
* A claim's room under bulkheads (`claim_room`). A claim cannot choose which downstream its
  tasks call, so it brings no task of a downstream whose bulkhead is already full of tasks
  held here, and no more tasks than the emptiest-but-not-full bulkhead has room for. "Full"
  counts a bulkhead of k as k permits plus k times the tasks claimed ahead per worker: its
  permits work through them about as fast as the workers work through their prefetch.
  Worked number: bulkhead 14, 2 tasks ahead per worker, 30 held -> room 14 + 28 - 30 = 12.
"""

from __future__ import annotations

from collections.abc import Mapping


def replaces_stuck(stuck: int, bound: int) -> bool:
    """Whether a worker that just became stuck gets a replacement: `stuck` counts it."""
    return stuck <= bound


def retires_on_return(serving: int, workers: int) -> bool:
    """Whether a stuck worker whose code returned leaves the pool: `serving` counts the
    workers that count as capacity, this one included; more than `workers` means a
    replacement took its place."""
    return serving > workers


def claim_want(threads: int, ahead: int, buffered: int, busy: int, committing: int) -> int:
    """How many more attempts a claim may bring for worker threads (<= 0: none). `threads`:
    threads that count as capacity; `ahead`: tasks they may hold claimed ahead (the
    prefetch); `buffered`: claimed, not started; `busy`: running on a thread that counts;
    `committing`: outcomes waiting for their commit (counted only beyond `ahead`)."""
    return threads + ahead - (buffered + busy + max(0, committing - ahead))


def claim_room(limits: Mapping[str, int], held: Mapping[str, int],
               ahead: float) -> tuple[frozenset[str], int | None]:
    """Downstreams a claim must skip (their bulkhead is full of tasks held here), and the
    most tasks it may bring (None: no bulkhead bounds it). `limits`: bulkhead size by
    downstream; `held`: tasks held here that call it; `ahead`: tasks claimed ahead per
    worker (the prefetch per worker)."""
    if not limits:
        return frozenset(), None
    room = {n: limit + int(limit * ahead) - held.get(n, 0) for n, limit in limits.items()}
    full = frozenset(n for n, r in room.items() if r <= 0)
    rooms = [r for r in room.values() if r > 0]
    return full, (min(rooms) if rooms else None)
