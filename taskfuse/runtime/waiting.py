"""Waiting for a task's or a batch's end: woken by the store, asking it as little as it can.

Theory of operation
-------------------
* The waiter sleeps in the store's own wake-up: PostgreSQL's done channel (a NOTIFY when any
  task ends, migration 8), SQLite's ``PRAGMA data_version`` (a read of shared memory, no
  table is read, that changes when another connection commits; looked at every 10 ms). A
  store without either (memory) is asked every `min_gap_s`. The wake-up is armed before the
  first question and remembers what it saw between calls, so an end committed between a
  question and the next sleep still wakes it (it cost up to the idle check before).
* After a wake-up it asks the one question (the task's record, or the batch's kept counts:
  one small query either way), but never sooner than `min_gap_s` after the last one, and,
  for a batch, not before a share of the time the batch still needs at the pace it has been
  ending (`holdoff`, at most MAX_HOLDOFF_S): a batch of 10k tasks draining for a minute is
  asked about twice a second, not at every commit, and more often as its end nears.
  That end is seen within `min_gap_s` plus one wake-up of the store (measured with
  benchmarks/test_bench_ops.py::test_wait_for_a_batch_of_10k).
* Without any wake-up it still asks every `idle_check_s`: a lost notification costs latency,
  never a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from taskfuse.core.states import TaskfuseError, TaskStatus, derive_batch_status
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Task

#: The soonest a waiter asks the store again after asking it: the most a batch's end can wait
#: for its question once the store said something ended.
MIN_GAP_S = 0.04
#: The longest a waiter trusts wake-ups alone before asking anyway.
IDLE_CHECK_S = 5.0
#: The longest a batch's rate may hold a waiter off asking. A batch's pace seen early (workers
#: still starting) was 6x too slow once, and a 1 s holdoff then saw the end 134 ms late.
MAX_HOLDOFF_S = 0.5
#: The share of a batch's expected remaining time a waiter may go without asking: a pace up
#: to 1 / share times faster than it was seen still ends after the next question.
HOLDOFF_SHARE = 0.25
_UNFINISHED = (TaskStatus.PENDING, TaskStatus.RUNNING)


class WaitError(TaskfuseError):
    """Nothing to wait for: no task or batch has that id."""


@dataclass(slots=True)
class WaitResult:
    """How a wait ended: `status` is the task's status or the batch's derived status (a
    `BatchStatus` value); `done` False means the timeout passed first."""

    target: str
    kind: str  # "task" or "batch"
    status: str
    done: bool
    waited_s: float
    queries: int
    task: Task | None = None
    counts: dict[TaskStatus, int] = field(default_factory=dict)


def _store_wake(store: Any) -> Callable[[float], bool] | None:
    inner = getattr(store, "inner", store)  # a LockedStore's store
    wake = getattr(inner, "wait_for_done", None)
    return wake if callable(wake) else None


def wait(store: Store, target: str, timeout: float | None, *,
         clock: Callable[[], float] = time.monotonic, min_gap_s: float = MIN_GAP_S,
         idle_check_s: float = IDLE_CHECK_S) -> WaitResult:
    """Wait until the task or batch `target` has ended, or `timeout` s passed (None: forever).

    Raises WaitError when `target` names neither a task nor a batch.
    """
    start = clock()
    end = float("inf") if timeout is None else start + timeout
    wake = _store_wake(store)
    if wake is not None:
        wake(0.0)  # armed before the first question: an end committed after it wakes us
    probe = _Probe(store, target, clock)
    result = probe.first
    while True:
        now = clock()
        result.waited_s = now - start
        if result.done or now >= end:
            return result
        ask_at = min(end, now + max(min_gap_s, probe.holdoff()))
        if wake is not None:  # sleep in the store's wake-up, at most until the idle check
            until = min(end, now + idle_check_s)
            while (left := until - clock()) > 0 and not wake(left):
                pass
        rest = ask_at - clock()
        if rest > 0:
            time.sleep(rest)
        result = probe.ask()


class _Probe:
    """The one question a waiter asks, and what it learnt of the batch's pace."""

    def __init__(self, store: Store, target: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.target = target
        self.clock = clock
        self.queries = 0
        self._first: tuple[float, int] | None = None  # (when, unfinished) before progress
        self._last: tuple[float, int] | None = None  # ... at the latest
        self._prev: tuple[float, int] | None = None  # ... and at the one before
        task = self._get()
        self.is_task = task is not None
        #: The answer of the question that found what `target` names: a task's record, or
        #: a batch's counts (a batch is told by its counts; its record only when empty).
        self.first = self._task_result(task) if task is not None else self._batch_result()
        if not self.is_task and not any(self.first.counts.values()):
            self.queries += 1
            if store.get_batch(target) is None:
                raise WaitError(f"no task or batch with id {target!r}")
            self.first.queries = self.queries

    def _get(self) -> Task | None:
        self.queries += 1
        return self.store.get(self.target)

    def _task_result(self, task: Task) -> WaitResult:
        done = task.status not in _UNFINISHED
        return WaitResult(self.target, "task", task.status.value, done, 0.0, self.queries,
                          task=task)

    def ask(self) -> WaitResult:
        if self.is_task:
            task = self._get()
            if task is None:
                raise WaitError(f"task {self.target!r} was deleted while waited for")
            return self._task_result(task)
        return self._batch_result()

    def _batch_result(self) -> WaitResult:
        self.queries += 1
        counts = self.store.counts(self.target)
        left = sum(counts[s] for s in _UNFINISHED)
        self._prev, self._last = self._last, (self.clock(), left)
        if self._first is None or self._first[1] == left:  # from the first progress seen
            self._first = self._last
        status = derive_batch_status(counts)
        return WaitResult(self.target, "batch", status.value, left == 0, 0.0, self.queries,
                          counts=counts)

    def holdoff(self) -> float:
        """How long asking again can wait: a quarter of the time the batch still needs at
        its pace, at most MAX_HOLDOFF_S. The pace is the faster of the average since the
        batch was first seen to progress and the latest interval's: a slow start or one
        quiet moment between group commits must not make the end look far away."""
        if self._first is None or self._last is None or self._prev is None:
            return 0.0
        (t0, left0), (tp, leftp), (t1, left1) = self._first, self._prev, self._last
        rates = [(a - left1) / (t1 - t) for t, a in ((t0, left0), (tp, leftp))
                 if t1 > t and a > left1]
        if not rates:
            return 0.0
        return min(MAX_HOLDOFF_S, HOLDOFF_SHARE * left1 / max(rates))
