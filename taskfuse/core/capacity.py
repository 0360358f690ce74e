"""Rules about a worker's capacity that every driver applies: one place, pure.

A driver (the threaded runtime, the simulator) keeps its own counts and asks these; neither
computes the rule itself, so a simulated worker replaces, retires and claims exactly as a
real one does.

* Stuck workers. A worker whose attempt was stopped (timeout, cancel) but whose code has not
  returned is stuck: it no longer counts as capacity. A replacement starts while at most
  `bound` workers are stuck (`replaces_stuck`), so there are never more than
  workers + bound of them; when a stuck worker's code returns to a pool that is full without
  it (a replacement took its place), it retires (`retires_on_return`).
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
