"""The simulated claims' room under bulkheads: the runtime's rule, counted in virtual time.

A real claimer brings no task of a downstream whose bulkhead is already full of tasks its
worker holds, and no more tasks than the emptiest other bulkhead has room for
(`taskfuse.core.capacity.claim_room`). Without the same rule here, a simulated claim took
tasks that the runtime leaves PENDING: they sat RUNNING, waiting for a permit, with their
timeouts running, and the lab foresaw timeouts a real worker never has (async kinds hold
thousands at once: a loop of 1,000 slots in front of a bulkhead of 50).

What the runtime counts as held, attempts claimed and not yet ended, buffered or running,
stuck ones aside, is counted here by attempt (task id and version): held from the claim
until the attempt ends, is interrupted, or gets stuck; an attempt is let go once, whichever
way comes first. Only downstreams with a bulkhead are counted; a scenario without one pays
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.capacity import claim_room
from taskfuse.core.guard import Guard
from taskfuse.core.task import Task


class BulkheadHolds:
    """Tasks held per bulkheaded downstream, and the room a claim has (module doc)."""

    def __init__(self, guards: dict[str, Guard], ahead: int) -> None:
        #: The downstreams' bulkheads: their limit is read at each claim (an adaptive one moves).
        self._bulkheads: dict[str, Bulkhead[Any]] = {
            name: g.bulkhead for name, g in guards.items() if g.bulkhead is not None}
        #: Tasks claimed ahead per worker (`claim_batch - 1`): the prefetch the rule allows for.
        self._ahead = ahead
        self.held = dict.fromkeys(self._bulkheads, 0)
        self._attempts: set[tuple[str, int]] = set()

    def __bool__(self) -> bool:
        return bool(self._bulkheads)

    def room(self) -> tuple[frozenset[str], int | None]:
        """Downstreams a claim must skip now, and the most tasks it may bring (None: any)."""
        limits = {name: b.limit for name, b in self._bulkheads.items()}
        return claim_room(limits, self.held, self._ahead)

    def hold(self, tasks: Iterable[Task]) -> None:
        """Claimed attempts: each counts against the bulkheads of the downstreams it calls."""
        held, attempts = self.held, self._attempts
        for task in tasks:
            attempts.add((task.task_id, task.version))
            for name in task.downstreams:
                if name in held:
                    held[name] += 1

    def let_go(self, task: Task) -> bool:
        """The attempt ended, was interrupted or got stuck: it holds nothing now (once).
        True when that gave room to a bulkhead that was full: an idle claim may now bring
        what it had to skip."""
        key = (task.task_id, task.version)
        if key not in self._attempts:
            return False
        self._attempts.discard(key)
        full, _ = self.room()
        held, freed = self.held, False
        for name in task.downstreams:
            if name in held:
                held[name] -= 1
                freed = freed or name in full
        return freed
