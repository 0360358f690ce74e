"""The async executor in virtual time: one worker process's event loop and its coroutines.

What makes it different from a pool of threads, and all this module models:

- A coroutine waiting on a call holds no worker. The loop runs up to `async_concurrency`
  coroutines at once, each kind at most its own `kinds.KIND.async_concurrency`; the
  `workers` count bounds thread kinds only. A claimed task that finds no free slot waits in
  the loop's FIFO queue (a WAIT for a slot in the trace, part of its queue wait).
- A coroutine is cancelled at its timeout (CancelledError at its next await): its slot is
  free at once, where a stuck thread stays busy until its code returns.
- The loop runs one coroutine at a time. A `cpu` step holds it: coroutines that want the
  loop meanwhile wait their turn (FIFO), and that wait is the loop's lag, reported
  (p50/p99/max) and traced as a WAIT for the loop. Time a coroutine spends awaiting
  (calls, `work`, a hang) costs the loop nothing. Only `cpu` steps are charged: a call's
  completion that arrives while the loop is busy is not delayed here (the real loop would
  delay it too, by at most the longest `cpu` step).

The lab simulates one worker process (the whole fleet's async capacity in one loop): the
simulated fleet is `workers` threads for thread and process kinds beside one event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import simpy

from taskfuse.core.events import Event, loop_wait
from taskfuse.core.task import Task
from taskfuse.limits.schema import Limits


class EventLoop:
    """Slots, the queue of claimed tasks waiting for one, and the loop's one CPU."""

    def __init__(self, env: simpy.Environment, limits: Limits, kinds: set[str]) -> None:
        self.env = env
        self.capacity = limits.async_concurrency
        #: Each async kind's own cap (its `async_concurrency`, else the loop's).
        self.caps = {k: limits.kinds[k].async_concurrency or self.capacity for k in kinds}
        self.in_flight = 0
        self.by_kind = dict.fromkeys(kinds, 0)
        self.queue: deque[Task] = deque()  # claimed, waiting for a slot (FIFO)
        self.busy_until = 0.0  # when the loop finishes the CPU it was given so far
        self.lags: list[float] = []  # one per cpu step: how long it waited for the loop
        self._sampled = 0  # lags already taken by `interval_lag`
        self.busy_s = 0.0
        self.peak = 0
        self.started = 0
        self.cancelled = 0  # coroutines cancelled at their timeout (or a cancel)
        #: The loop's claimer, asleep until a slot frees (None: not waiting).
        self.room_waiter: simpy.Event | None = None

    def room(self) -> int:
        """How many tasks a claim may take now: free slots less those already queued, and
        no more than the async kinds' own caps leave."""
        free = self.capacity - self.in_flight - len(self.queue)
        by_kind = self.by_kind
        kinds = sum(max(0, cap - by_kind[k]) for k, cap in self.caps.items())
        return min(free, kinds - len(self.queue))

    def fits(self, kind: str) -> bool:
        return self.in_flight < self.capacity and self.by_kind[kind] < self.caps[kind]

    def take(self, kind: str) -> None:
        self.in_flight += 1
        self.by_kind[kind] += 1
        self.started += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def give(self, kind: str) -> None:
        self.in_flight -= 1
        self.by_kind[kind] -= 1
        self.wake()

    def wake(self) -> None:
        """Wake whoever waits for room (a slot freed, or a handed task was taken)."""
        waiter = self.room_waiter
        if waiter is not None:
            self.room_waiter = None
            waiter.succeed()

    def wait_room(self) -> simpy.Event:
        """An event that fires at the next `wake` (a slot may be free)."""
        if self.room_waiter is None:
            self.room_waiter = self.env.event()
        return self.room_waiter

    def next_runnable(self) -> Task | None:
        """The oldest queued task whose kind has a slot now (FIFO among those that fit)."""
        queue = self.queue
        for i, task in enumerate(queue):
            if self.fits(task.kind):
                del queue[i]
                return task
            if self.in_flight >= self.capacity:
                return None
        return None

    def interval_lag(self) -> float:
        """The largest lag since the previous call (0: no coroutine waited for the loop):
        the trace's `loop_lag` sample and the loop-lag alert's value, as the runtime's."""
        fresh = self.lags[self._sampled:]
        self._sampled = len(self.lags)
        return max(fresh, default=0.0)

    def cpu(self, task: Task, seconds: float, detail: Callable[[Event], None] | None
            ) -> Generator[simpy.Event, Any, None]:
        """Run `seconds` of CPU on the loop: wait for it (FIFO, the lag), then hold it."""
        env = self.env
        now = env.now
        start = self.busy_until if self.busy_until > now else now
        self.busy_until = start + seconds
        self.busy_s += seconds
        lag = start - now
        self.lags.append(lag)
        if lag > 0 and detail is not None:
            detail(loop_wait(task, start, lag))
        yield env.timeout(self.busy_until - now)
