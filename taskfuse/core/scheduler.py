"""The Scheduler: every decision about tasks, none of the waiting.

Drivers (threads in real time, simpy in virtual time) ask and obey:

* `claim(worker_id, now, n)` -> `Work(tasks)` or `Idle(until)`; idle until `until` (None:
  until told of new work).
* `complete(task, outcome, now)` -> `Completed(task)` or `LostRace(current)`. A retryable
  error with attempts left goes back to PENDING with a backoff; a task refused by its own
  downstream's open breaker goes back without using an attempt (DEFER).
* `cancel` / `cancel_batch`, `expire(now)` (the watchdog), `sweep(now)` (the orphan sweeper),
  `release(task, now)` (graceful shutdown), `next_wakeup(now)`.
* `guards[name]` holds the fuses of each downstream; while one's breaker is open, tasks that
  declared it stay PENDING instead of burning attempts, and half-open probes are real tasks.

An attempt is the RUNNING record `claim` handed out. `heartbeat`, `is_cancelled`, `complete`
and `release` take that record and answer any attempt but the task's current one "not yours"
(False, True, `LostRace`, None): the caller stops, and nothing it says changes the task.

Every move goes through `task.move` (the transition table) and `store.swap` (compare-and-set);
a lost swap is re-read and decided again, never overwritten. Every move is an event.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from itertools import count
from typing import Any, NamedTuple

from taskfuse.core import bounds
from taskfuse.core.dag import check_graph
from taskfuse.core.events import Emitter, Event, EventKind, EventSink, SerialEmitter
from taskfuse.core.guard import Guard
from taskfuse.core.retry import ErrorKind, RetryPolicy, RetryThrottle
from taskfuse.core.states import (
    BAD_ENDINGS,
    TERMINAL,
    BatchStatus,
    TaskEvent,
    TaskfuseError,
    TaskStatus,
    derive_batch_status,
)
from taskfuse.core.storeapi import Store
from taskfuse.core.task import Batch, Outcome, Task, TaskSpec, move, new_task

_RUNNING = TaskStatus.RUNNING
_PENDING = TaskStatus.PENDING
_SUCCEED = TaskEvent.SUCCEED
_MOVE = EventKind.MOVE
_NOTHING: frozenset[str] = frozenset()
#: The lock of a scheduler no thread shares (the lab's): hot paths skip entering it.
_NO_LOCK: AbstractContextManager[Any] = nullcontext()
#: How long after a deadline the watchdog looks: `expire` wants started_at + timeout < now.
DEADLINE_SLACK_S = 0.002
#: The error kind of a RUNNING task the sweeper ends for being beyond its attempts (rule 3).
ATTEMPTS_EXCEEDED = "attempts_exceeded"
#: The error kind of a task whose result is larger than `SchedulerConfig.max_result_bytes`.
RESULT_TOO_LARGE = "result_too_large"
#: The result bound when none is given: 1 MiB of JSON.
DEFAULT_MAX_RESULT_BYTES = 1 << 20


def result_size(result: Any) -> int:
    """Bytes of `result` as the stores keep it (compact JSON); 0 for what JSON cannot hold
    (the store refuses that itself, unwritten)."""
    try:
        return len(json.dumps(result, allow_nan=False, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return 0


def _same_move(stored: Task, new: Task) -> bool:
    """Whether `stored` is the record `new` would have written (a repeated write landed)."""
    return (stored.version == new.version and stored.status is new.status
            and stored.finished_at == new.finished_at and stored.not_before == new.not_before
            and stored.retry_count == new.retry_count)


def holds(attempt: Task, stored: Task | None) -> bool:
    """Whether `attempt` (a record a claim returned) is still the task's current attempt.

    (task_id, version) names an attempt: every move bumps the version, a heartbeat does not.
    """
    return stored is not None and stored.version == attempt.version and stored.status is _RUNNING


class SchedulerError(TaskfuseError):
    """A request the scheduler refuses (bad spec, unknown batch)."""


class Work(NamedTuple):
    """Run these tasks (already RUNNING for you).

    Claim answers are NamedTuples: immutable like the other answers, and built on every
    claim, where a frozen dataclass cost a tenth of the whole claim."""

    tasks: list[Task]


class Idle(NamedTuple):
    """Nothing to claim: sleep until `until`, or until told of new work when None."""

    until: float | None


@dataclass(frozen=True, slots=True)
class Completed:
    """The move was applied; `task` is the new record (PENDING again when retried)."""

    task: Task


@dataclass(frozen=True, slots=True)
class LostRace:
    """Someone moved the task first (watchdog, cancel, sweeper); `current` is what won."""

    current: Task | None


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Defaults and sweeper rules (`Scheduler.sweep`).

    `lease_s`: a RUNNING task whose heartbeat is older than this is an orphan (None: only the
    2 x timeout rule applies). `max_pending_age_s`: PENDING tasks waiting longer than this
    (since they last became PENDING) are CANCELED by the sweeper (None: never).
    `max_result_bytes`: a task whose result is larger (as JSON) ends FAILED with
    RESULT_TOO_LARGE at completion, instead of a row too large to write or to read back
    (None: no bound).
    """

    default_timeout: float = 60.0
    lease_s: float | None = None
    max_pending_age_s: float | None = None
    max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        if self.default_timeout <= 0:
            raise ValueError(f"default_timeout must be > 0, got {self.default_timeout!r}")
        for name in ("lease_s", "max_pending_age_s", "max_result_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (or None), got {value!r}")


class Scheduler:
    def __init__(
        self,
        store: Store,
        *,
        policy: RetryPolicy | None = None,
        policies: Mapping[str, RetryPolicy] | None = None,
        config: SchedulerConfig | None = None,
        rng: random.Random | None = None,
        sinks: Iterable[EventSink] = (),
        budget: RetryThrottle | None = None,
        ids: Callable[[], str] | None = None,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.store = store
        #: Held around every decision that reads or changes in-memory state (the rng, the
        #: budget, the guards), never around a store call: a threaded driver passes the lock
        #: its fuses share, so database round trips of many threads overlap while decisions
        #: stay atomic. The lab passes none.
        self.lock: AbstractContextManager[Any] = lock if lock is not None else _NO_LOCK
        self.policy = policy or RetryPolicy()
        self.policies = dict(policies or {})
        self.config = config or SchedulerConfig()
        self.rng = rng if rng is not None else random.Random(0)
        self.emit = Emitter(list(sinks))
        self.budget = budget
        self.guards: dict[str, Guard] = {}
        self._gated: list[Guard] = []  # guards with a breaker: the only ones that can block
        self._custom: dict[tuple[str, int], RetryPolicy] = {}  # policies with a task's max_retry
        seq = count(1)
        self._new_id = ids or (lambda: f"t{next(seq)}")

    # -- set-up ----------------------------------------------------------------------------

    def serialize(self, lock: AbstractContextManager[Any],
                  emit_lock: AbstractContextManager[Any]) -> None:
        """Make this scheduler safe for a threaded driver: decisions (rng, budget, guards)
        under `lock`, which the driver's fuse calls share, and events one at a time under
        `emit_lock`. Store calls stay outside both, so many threads' round trips overlap."""
        self.lock = lock
        self.emit = SerialEmitter(self.emit.sinks, emit_lock)
        for guard in self.guards.values():
            guard.emit = self.emit

    def add_guard(self, guard: Guard) -> Guard:
        """Register a downstream's fuses; its breaker changes become events."""
        guard.emit = self.emit
        if guard.breaker is not None and guard.breaker.listener is None:
            guard.breaker.listener = guard.breaker_listener
        self.guards[guard.name] = guard
        self._gated = [g for g in self.guards.values() if g.breaker is not None]
        return guard

    def policy_for(self, kind: str) -> RetryPolicy:
        return self.policies.get(kind, self.policy)

    # -- submitting ------------------------------------------------------------------------

    def _build(self, spec: TaskSpec, now: float, batch_id: str | None) -> Task:
        policy = self.policy_for(spec.kind)
        try:  # the one place every submission passes: bounds hold for every store
            timeout = bounds.duration("task timeout", spec.timeout if spec.timeout is not None
                                      else self.config.default_timeout)
            max_retry = bounds.count("max_retry", spec.max_retry if spec.max_retry is not None
                                     else policy.max_retry, 0, bounds.MAX_RETRY)
            bounds.count("priority", spec.priority, bounds.MIN_INT64, bounds.MAX_INT64)
        except bounds.BoundError as exc:
            raise SchedulerError(str(exc)) from None
        # new_task takes SUBMITTED_FIELDS by position, in that order
        return new_task(
            spec.task_id or self._new_id(),
            spec.kind,
            spec.payload,
            spec.batch_id if spec.batch_id is not None else batch_id,
            spec.trace_id or self.rng.getrandbits(64).to_bytes(8, "big").hex(),
            spec.idempotency_key,
            tuple(spec.depends_on),
            spec.priority,
            max_retry,
            timeout,
            spec.not_before,
            now,
            tuple(spec.downstreams),
            now,
        )

    def submit(self, spec: TaskSpec, now: float) -> Task:
        """Submit one task; a duplicate idempotency_key returns the existing task."""
        return self.submit_many([spec], now)[0]

    def submit_batch(
        self, specs: Sequence[TaskSpec], now: float, batch_id: str, cap: int | None = None
    ) -> list[Task]:
        """Submit a batch whose tasks run at most `cap` at a time (None: no cap)."""
        if cap is not None and cap < 1:
            raise SchedulerError(f"batch cap must be >= 1, got {cap!r}")
        self.store.put_batch(Batch(batch_id, cap, now))
        return self.submit_many(specs, now, batch_id=batch_id)

    def submit_many(
        self, specs: Sequence[TaskSpec], now: float, batch_id: str | None = None
    ) -> list[Task]:
        """Submit tasks at once; they may form a DAG among themselves and with stored tasks.

        All or nothing: a cycle refuses the whole submission here, a dependency the store
        does not hold (`MissingDependency`) in the store's insert, in the transaction that
        would write it: a check before it could pass while a prune removed the parent.
        """
        tasks = [self._build(s, now, batch_id) for s in specs]
        if any(t.depends_on for t in tasks):
            check_graph({t.task_id: t.depends_on for t in tasks})
        stored = self.store.insert(tasks)
        emit = self.emit
        out = []
        for task, created in stored:
            out.append(task)
            if not created:
                continue
            if emit.sinks:
                emit(Event(now, EventKind.SUBMIT, task.task_id, task.batch_id, task.trace_id,
                           None, _PENDING, None, 1, None))
            if task.depends_on:
                self._cancel_if_upstream_failed(task, now)
        return out

    def _cancel_if_upstream_failed(self, task: Task, now: float) -> None:
        for dep in task.depends_on:
            parent = self.store.get(dep)
            if parent is not None and parent.status in BAD_ENDINGS:
                reason = f"upstream {dep} ended {parent.status.value}"
                self._cancel_chain(task.task_id, now, reason, TaskEvent.UPSTREAM_FAILED)
                return

    # -- claiming --------------------------------------------------------------------------

    def blocked(self, now: float) -> frozenset[str]:
        """Downstreams whose breaker keeps their tasks PENDING right now."""
        gated = self._gated
        if not gated:
            return _NOTHING
        with self.lock:
            return frozenset(g.name for g in gated if g.blocks(now))

    def claim(self, worker_id: str, now: float, n: int = 1,
              exclude: AbstractSet[str] = _NOTHING, *,
              also_blocked: frozenset[str] = _NOTHING) -> Work | Idle:
        """Up to `n` ready tasks, RUNNING for `worker_id`; or how long to idle.

        `exclude` names tasks this claim must skip even when ready: a driver passes the
        tasks whose previous attempt still occupies one of its threads (timed out or
        canceled, but its code has not returned), so a retry never overlaps it unless the
        kind allows it (`kinds.KIND.overlap`). `also_blocked` adds downstreams the driver
        cannot start more calls to (its bulkheads are full of tasks it already holds).
        """
        blocked = self.blocked(now) if self._gated else _NOTHING
        if also_blocked:
            blocked = blocked | also_blocked
        if exclude:
            tasks = self.store.claim(worker_id, now, n, blocked, frozenset(exclude))
        else:
            tasks = self.store.claim(worker_id, now, n, blocked)
        if not tasks:
            return Idle(self.next_claimable_at(now))
        emit = self.emit
        budget = self.budget
        if budget is not None and self.lock is not _NO_LOCK:
            with self.lock:
                for task in tasks:
                    if task.retry_count == 0:
                        budget.record_first(now)  # retries were charged when decided
            budget = None
        if emit.sinks or budget is not None:
            for task in tasks:
                if budget is not None and task.retry_count == 0:
                    budget.record_first(now)  # retries were charged when they were decided
                if emit.sinks:
                    emit(Event(now, _MOVE, task.task_id, task.batch_id, task.trace_id,
                               _PENDING, _RUNNING, "claim", task.retry_count + 1, worker_id))
        return Work(tasks)

    def next_claimable_at(self, now: float) -> float | None:
        """When a claim could next succeed without new work arriving (None: never)."""
        times = [self.store.next_ready_at(now)]
        with self.lock:
            times += [
                g.breaker.reopen_at()
                for g in self.guards.values()
                if g.breaker is not None and g.blocks(now)
            ]
        due = [t for t in times if t is not None]
        return min(due) if due else None

    def watchdog_wait(self, now: float, max_wait: float) -> float:
        """Seconds until the watchdog should look again: just past the earliest deadline of a
        RUNNING task (overdue means strictly past it), and never longer than `max_wait`.

        Every driver times its watchdog with this, so a timeout is noticed at the same moment
        in a simulation and in a real run; a driver that starts a task whose deadline comes
        sooner than its watchdog's next look wakes the watchdog to ask again.
        """
        deadline = self.store.next_deadline()
        if deadline is None:
            return max_wait
        wait = deadline - now + DEADLINE_SLACK_S
        return max_wait if wait > max_wait else (wait if wait > 0.0 else 0.0)

    def next_wakeup(self, now: float) -> float | None:
        """The earliest time anything becomes due: a claim, a deadline, a breaker."""
        due = [t for t in (self.next_claimable_at(now), self.store.next_deadline()) if t]
        return min(due) if due else None

    # -- finishing -------------------------------------------------------------------------

    def complete(self, task: Task, outcome: Outcome, now: float) -> Completed | LostRace:
        """Apply the outcome of the attempt `task` (the record its claim returned) made.

        Any attempt but the task's current one gets `LostRace`: its result is discarded. It
        reads the task first, so such an attempt decides nothing (no rng draw, no budget
        charge): what the lab's one-at-a-time driver wants. A threaded driver that writes
        many outcomes at once uses `complete_many`.
        """
        store = self.store
        current = store.get(task.task_id)
        # holds(task, current), written out: every completion passes here (one call fewer)
        if current is None or current.version != task.version or current.status is not _RUNNING:
            return LostRace(current)
        if self.lock is _NO_LOCK:
            new, reason = self._after(current, outcome, now)
        else:
            with self.lock:
                new, reason = self._after(current, outcome, now)
        if not store.swap(new, current.version):
            return LostRace(store.get(task.task_id))
        if self.budget is not None:
            with self.lock:
                self.budget.record_outcome(now, outcome.ok)
        self._moved(current, new, now, reason)
        return Completed(new)

    def complete_many(self, items: Sequence[tuple[Task, Outcome]], now: float
                      ) -> list[Completed | LostRace]:
        """Apply the outcomes of many attempts in one round trip to the store (group commit).

        Each new record is built from the attempt's own record (the version it was claimed
        at) and written with that version as the compare-and-set's expectation, so nothing
        is read first: an attempt that is no longer the task's current one (timed out,
        canceled, swept, released) loses its swap and answers `LostRace` with what won.
        """
        with self.lock:
            planned = [self._after(task, outcome, now) for task, outcome in items]
        won = self.store.swap_many([(new, task.version) for (task, _), (new, _) in
                                    zip(items, planned, strict=True)])
        budget = self.budget
        if budget is not None:
            with self.lock:
                for (_, outcome), ok in zip(items, won, strict=True):
                    if ok:
                        budget.record_outcome(now, outcome.ok)
        out: list[Completed | LostRace] = []
        for (task, _), (new, reason), ok in zip(items, planned, won, strict=True):
            if ok:
                self._moved(task, new, now, reason)
                out.append(Completed(new))
                continue
            current = self.store.get(task.task_id)
            if current is not None and _same_move(current, new):
                out.append(Completed(current))  # a repeat of a group whose write landed
            else:
                out.append(LostRace(current))
        return out

    def _after(self, task: Task, outcome: Outcome, now: float) -> tuple[Task, str]:
        if outcome.ok:
            limit = self.config.max_result_bytes
            if limit is not None and outcome.result is not None:
                size = result_size(outcome.result)
                if size > limit:
                    why = (f"result of {size} bytes is over the limit of {limit} bytes "
                           "(max_result_bytes): not stored")
                    return move(task, TaskEvent.FAIL, now, error_kind=RESULT_TOO_LARGE,
                                error_msg=why), "result too large"
            new = move(task, _SUCCEED, now)
            new.result = outcome.result  # not stored yet: still ours to finish
            return new, "ok"
        kind = outcome.error_kind or "error"
        msg = outcome.error_msg
        if kind == ErrorKind.BREAKER_OPEN:
            until = self._reopen_time(task, now)
            return (
                move(task, TaskEvent.DEFER, now, not_before=until, error_kind=kind, error_msg=msg),
                "deferred: breaker open",
            )
        decision = self._decide(task, kind, now)
        if decision.retry:
            new = move(task, TaskEvent.RETRY, now, not_before=now + decision.delay,
                       last_delay=decision.delay, error_kind=kind, error_msg=msg)
            return new, decision.reason
        return move(task, TaskEvent.FAIL, now, error_kind=kind, error_msg=msg), decision.reason

    def _decide(self, task: Task, kind: str, now: float, timeout: bool = False) -> Any:
        """The retry decision (rng, budget, policy): call with `self.lock` held."""
        policy = self.policy_for(task.kind)
        if policy.max_retry != task.max_retry:
            key = (task.kind, task.max_retry)
            policy = self._custom.get(key) or self._custom.setdefault(
                key, replace(policy, max_retry=task.max_retry)
            )
        if timeout:
            return policy.decide_timeout(
                task.retry_count, self.rng, task.last_delay, self.budget, now
            )
        return policy.decide(task.retry_count, kind, self.rng, task.last_delay, self.budget, now)

    def _reopen_time(self, task: Task, now: float) -> float:
        times = [
            self.guards[d].breaker.reopen_at()  # type: ignore[union-attr]
            for d in task.downstreams
            if d in self.guards and self.guards[d].breaker is not None
        ]
        due = [t for t in times if t is not None and t > now]
        return min(due) if due else now

    def _moved(self, old: Task, new: Task, now: float, reason: str | None) -> None:
        """Report a move, and cancel the dependents of a task that ended badly."""
        if self.emit.sinks:
            self.emit(Event(now, _MOVE, new.task_id, new.batch_id, new.trace_id, old.status,
                            new.status, reason, old.retry_count + 1, old.worker_id))
        if new.status in BAD_ENDINGS:
            reason = f"upstream {new.task_id} ended {new.status.value}"
            for child in self.store.dependents(new.task_id):
                self._cancel_chain(child.task_id, now, reason, TaskEvent.UPSTREAM_FAILED)

    def _apply(
        self, task_id: str, now: float, decide: Callable[[Task], tuple[Task, str] | None]
    ) -> Task | None:
        """Read, decide, compare-and-set; on a lost race re-read and decide again.

        `decide` answers the new record and a reason, or None when nothing is to be done.
        """
        store = self.store
        while True:
            current = store.get(task_id)
            if current is None:
                return None
            if self.lock is _NO_LOCK:
                answer = decide(current)
            else:
                with self.lock:
                    answer = decide(current)
            if answer is None:
                return None
            new, reason = answer
            if store.swap(new, current.version):
                self._moved(current, new, now, reason)
                return new

    def _cancel_chain(self, task_id: str, now: float, reason: str, event: TaskEvent) -> None:
        def decide(t: Task) -> tuple[Task, str] | None:
            if t.status in TERMINAL:
                return None
            kind = ErrorKind.UPSTREAM_FAILED
            return move(t, event, now, error_kind=kind, error_msg=reason), reason

        self._apply(task_id, now, decide)

    # -- operator and periodic actions -----------------------------------------------------

    def cancel(self, task_id: str, now: float, reason: str = "canceled") -> Task | None:
        """Cancel a PENDING or RUNNING task; None if it is unknown or already terminal.

        A RUNNING task changes status now; its worker notices through its context and its
        late result loses the version check.
        """
        def decide(t: Task) -> tuple[Task, str] | None:
            if t.status in TERMINAL:
                return None
            new = move(t, TaskEvent.CANCEL, now, error_kind=ErrorKind.CANCELED, error_msg=reason)
            return new, reason

        return self._apply(task_id, now, decide)

    def cancel_batch(self, batch_id: str, now: float, reason: str = "batch canceled") -> int:
        """Cancel every unfinished task of a batch; returns how many moved (0 when all ended).

        A batch is known by its record or by any task of it, in any status: tasks submitted
        with a batch id but no record, all RUNNING or all ended, are still its tasks.
        The store moves them all at once (one statement on a database) through the table's
        CANCEL rule: a task-by-task cancel trailed the workers, who claimed and ran most of
        a large batch while it was being canceled.
        """
        if self.store.get_batch(batch_id) is None and not any(
            self.store.counts(batch_id).values()
        ):
            raise SchedulerError(f"unknown batch {batch_id!r}")
        moved = self.store.cancel_batch(batch_id, now, ErrorKind.CANCELED, reason)
        if self.emit.sinks:  # one event per task
            for left, new in moved:
                self.emit(Event(now, _MOVE, new.task_id, new.batch_id, new.trace_id, left,
                                new.status, reason, new.retry_count + 1, new.worker_id))
        canceled = {new.task_id: new for _, new in moved}
        # their dependents, found in one query (one each would trail the workers again)
        for child in self.store.dependents_of(list(canceled)):
            if child.status not in TERMINAL:
                parent = next(d for d in child.depends_on if d in canceled)
                self._cancel_chain(child.task_id, now, f"upstream {parent} ended "
                                   f"{canceled[parent].status.value}", TaskEvent.UPSTREAM_FAILED)
        return len(moved)

    def expire(self, now: float, held: AbstractSet[str] = frozenset()) -> list[Task]:
        """The watchdog: RUNNING past started_at + timeout -> TIMEOUT, or PENDING to retry.

        `held`: tasks whose attempt has ended and whose outcome the caller holds until the
        store takes it (an outage). They are not running: expiring them would run their
        side effects a second time, so they keep their record until the outcome lands.
        """
        moved = []
        for task in self.store.overdue(now):
            if task.task_id in held:
                continue
            new = self._apply(task.task_id, now, partial(self._timeout_move, now=now, seen=task))
            if new is not None:
                moved.append(new)
        return moved

    def _timeout_move(self, t: Task, now: float, seen: Task) -> tuple[Task, str] | None:
        if t.status is not _RUNNING or t.version != seen.version:
            return None
        msg = f"no result within {t.timeout:g}s"
        decision = self._decide(t, ErrorKind.TIMEOUT, now, timeout=True)
        if decision.retry:
            new = move(t, TaskEvent.TIMEOUT_RETRY, now, not_before=now + decision.delay,
                       last_delay=decision.delay, error_kind=ErrorKind.TIMEOUT, error_msg=msg)
            return new, decision.reason
        new = move(t, TaskEvent.TIME_OUT, now, error_kind=ErrorKind.TIMEOUT, error_msg=msg)
        return new, decision.reason

    def sweep(self, now: float, answering_for_s: float | None = None) -> list[Task]:
        """The orphan sweeper: three rules, each on its own, always through the version check.

        1. Orphans: a RUNNING task whose lease lapsed (`lease_s` without a heartbeat) or, in
           any case, RUNNING longer than 2 x its timeout goes back to PENDING when attempts
           remain (ORPHAN_RETRY), else FAILED ("worker crashed or task hung").
        2. Waited too long: a PENDING task waiting longer than `max_pending_age_s` is
           CANCELED (EXPIRE). Waiting counts from when it last became PENDING
           (`Task.waiting_since`), not from created_at: the tasks rule 1 has just put back,
           released at shutdown, deferred by a breaker or retried after a backoff start
           waiting anew, so a pass never cancels what it (or a worker) just requeued.
        3. Beyond its attempts: a RUNNING task whose retry_count is ABOVE max_retry is ended
           (ORPHAN_FAIL) at once, lease or not. The source's rule says "at or above", but
           here retry_count counts retries done, so retry_count == max_retry is the last
           attempt, legitimate and possibly healthy: ending it would kill good work. Only a
           record no scheduler writes (an operator lowered max_retry, a bug, an import) is
           above the limit, and no lease makes it legitimate. A last attempt that hangs or
           loses its worker is ended by rule 1, and FAILED rather than retried, since no
           attempt remains; so "at the limit and still RUNNING" never outlives 2 x timeout.

        Rule 1 runs first, so what it requeues is seen by rule 2 as waiting since `now`.

        Rule 1 waits a lease after an outage. `answering_for_s` is how long the store has
        answered without a break (None: no break known). Within `lease_s` of the database
        answering again, a lapsed lease proves nothing: a live worker could not renew it
        during the outage, and it may hold an attempt's outcome it is about to commit;
        handing that task back would run its side effect twice. A lease later, every live
        worker has renewed its leases or committed its outcomes (a heartbeat comes more
        often than a lease), and what is still stale is an orphan.
        """
        moved = []
        if not self.leases_wait(answering_for_s):
            for task in self.store.stale_running(now, self.config.lease_s):
                new = self._apply(task.task_id, now,
                                  partial(self._orphan_move, now=now, seen=task))
                if new is not None:
                    moved.append(new)
        for task in self.store.running_over_limit():
            new = self._apply(task.task_id, now, partial(self._over_limit_move, now=now,
                                                         seen=task))
            if new is not None:
                moved.append(new)
        max_age = self.config.max_pending_age_s
        if max_age is not None:
            for task in self.store.waiting_since_before(now - max_age):
                new = self._apply(task.task_id, now, partial(self._expire_move, now=now, seen=task))
                if new is not None:
                    moved.append(new)
        return moved

    def leases_wait(self, answering_for_s: float | None) -> bool:
        """Whether the store answers again since less than a lease (see `sweep`)."""
        lease = self.config.lease_s
        return answering_for_s is not None and lease is not None and answering_for_s < lease

    def _orphan_move(self, t: Task, now: float, seen: Task) -> tuple[Task, str] | None:
        if t.status is not _RUNNING or t.version != seen.version:
            return None
        msg = "worker crashed or task hung"
        if t.retry_count < t.max_retry:
            return (
                move(t, TaskEvent.ORPHAN_RETRY, now, error_kind=ErrorKind.ORPHANED, error_msg=msg),
                f"orphaned: retry {t.retry_count + 1} of {t.max_retry}",
            )
        return (
            move(t, TaskEvent.ORPHAN_FAIL, now, error_kind=ErrorKind.ORPHANED, error_msg=msg),
            "orphaned: attempts exhausted",
        )

    def _over_limit_move(self, t: Task, now: float, seen: Task) -> tuple[Task, str] | None:
        if t.status is not _RUNNING or t.version != seen.version or t.retry_count <= t.max_retry:
            return None
        msg = (f"attempt {t.attempt} RUNNING but max_retry {t.max_retry} allows "
               f"{t.max_retry + 1}")
        return (move(t, TaskEvent.ORPHAN_FAIL, now, error_kind=ATTEMPTS_EXCEEDED, error_msg=msg),
                "attempts exceeded")

    def _expire_move(self, t: Task, now: float, seen: Task) -> tuple[Task, str] | None:
        if t.status is not _PENDING or t.version != seen.version:
            return None
        msg = f"pending longer than {self.config.max_pending_age_s:g}s"
        return move(t, TaskEvent.EXPIRE, now, error_kind="expired", error_msg=msg), msg

    def release(self, task: Task, now: float, reason: str = "shutdown") -> Task | None:
        """Graceful shutdown: hand the attempt `task` back to PENDING (no attempt used).

        None when `task` is not the task's current attempt: a stale attempt releases nothing.
        """
        def decide(t: Task) -> tuple[Task, str] | None:
            if not holds(task, t):
                return None
            return move(t, TaskEvent.RELEASE, now), reason

        return self._apply(task.task_id, now, decide)

    def heartbeat(self, task: Task, now: float) -> bool:
        """Renew the lease of the attempt `task`; False means it is not ours any more (stop).

        Keyed on the attempt, not the worker: a worker that claimed the task again after a
        timeout cannot have its new lease renewed by its own stale first attempt.
        """
        return self.store.heartbeat(task.task_id, task.version, now)

    def heartbeat_many(self, attempts: Sequence[Task], now: float) -> list[bool]:
        """Renew the leases of many attempts in one round trip; False: that one is not ours."""
        if not attempts:
            return []
        return self.store.heartbeat_many([(t.task_id, t.version) for t in attempts], now)

    def is_cancelled(self, task: Task) -> bool:
        """Whether the attempt `task` should stop: its record moved on without it."""
        return not holds(task, self.store.get(task.task_id))

    # -- queries ---------------------------------------------------------------------------

    def batch_status(self, batch_id: str) -> BatchStatus:
        counts = self.store.counts(batch_id)
        if not any(counts.values()) and self.store.get_batch(batch_id) is None:
            raise SchedulerError(f"unknown batch {batch_id!r}")
        return derive_batch_status(counts)

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        return self.store.counts(batch_id)

    def settled(self, batch_id: str | None = None) -> bool:
        """Whether no task (of the batch, or at all) is PENDING or RUNNING: a cheap question
        for a store (an index probe), where `counts` reads every row."""
        return not self.store.has_unfinished(batch_id)

