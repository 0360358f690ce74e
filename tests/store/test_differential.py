"""The core's hypothesis state machine, run differentially: MemoryStore against each durable store.

Every store call the scheduler makes goes to a `DiffStore`, which asks MemoryStore (the
reference) and the durable store the same question and asserts that the answers are equal
(task records field by field, lists in order where order is part of the contract), then
hands the durable store's answer to the scheduler. So the same operation sequence drives
both, and a durable store that claims in another order, forgets a not_before, leaks a cap
or keeps a dependent waiting is caught at the first answer that differs, with hypothesis
shrinking the sequence. The machine's own invariants run on top, against the durable store.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from taskfuse.core.dag import MissingDependency
from taskfuse.core.states import TRANSITIONS, TaskEvent, TaskStatus
from taskfuse.core.task import Batch, Task, move
from taskfuse.store.memory import MemoryStore
from tests.core.test_scheduler_machine import REPLAYS, SchedulerMachine
from tests.scale import examples, steps
from tests.store.backends import drop_schema, need_pg, new_schema, pg_url


def _ids(tasks: Iterable[Task]) -> list[str]:
    return sorted(t.task_id for t in tasks)


def _by_task_id(tasks: Sequence[Task]) -> list[Task]:
    return sorted(tasks, key=lambda t: t.task_id)


class DiffStore:
    """A Store that answers from `subject` after checking `reference` answers the same."""

    def __init__(self, reference: MemoryStore, subject: Any) -> None:
        self.ref = reference
        self.sub = subject

    def _same(self, name: str, ref: Any, sub: Any) -> Any:
        assert ref == sub, f"{name}: memory answered {ref!r}\n  durable answered {sub!r}"
        return sub

    def _both(self, name: str, *args: Any) -> Any:
        return self._same(name, getattr(self.ref, name)(*args), getattr(self.sub, name)(*args))

    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        """Both take the tasks alike, or both refuse them naming the same dependency."""
        answers: list[tuple[str, Any]] = []
        for store in (self.ref, self.sub):
            try:
                answers.append(("took", store.insert(tasks)))
            except MissingDependency as exc:
                answers.append(("refused", (exc.task_id, exc.missing)))
        self._same("insert", *answers)
        if answers[1][0] == "refused":
            raise MissingDependency(*answers[1][1])
        return answers[1][1]  # type: ignore[no-any-return]

    def get(self, task_id: str) -> Task | None:
        return self._both("get", task_id)

    def find(self, id_or_trace: str) -> list[Task]:
        return self._both("find", id_or_trace)

    def swap(self, new: Task, expected_version: int) -> bool:
        return self._both("swap", new, expected_version)

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        return self._both("swap_many", moves)

    def dependents_of(self, task_ids: Sequence[str]) -> list[Task]:
        """Compared as sets: the protocol promises each dependent once, not an order (memory
        answers by parent, the databases by submission)."""
        ref, sub = self.ref.dependents_of(task_ids), self.sub.dependents_of(task_ids)
        self._same("dependents_of", _by_task_id(ref), _by_task_id(sub))
        return sub

    def cancel_batch(self, batch_id: str, now: float, error_kind: str,
                     reason: str) -> list[tuple[TaskStatus, Task]]:
        """Compared as sets: the order of a database's RETURNING rows is not promised."""
        def by_id(pairs: list[tuple[TaskStatus, Task]]) -> list[tuple[TaskStatus, Task]]:
            return sorted(pairs, key=lambda pair: pair[1].task_id)

        args = (batch_id, now, error_kind, reason)
        return self._same("cancel_batch", by_id(self.ref.cancel_batch(*args)),
                          by_id(self.sub.cancel_batch(*args)))

    def claim(self, worker_id: str, now: float, limit: int,
              blocked: frozenset[str] = frozenset(),
              exclude: frozenset[str] = frozenset()) -> list[Task]:
        return self._both("claim", worker_id, now, limit, blocked, exclude)

    def heartbeat_many(self, attempts: Sequence[tuple[str, int]], now: float) -> list[bool]:
        return self._both("heartbeat_many", attempts, now)

    def has_unfinished(self, batch_id: str | None = None) -> bool:
        return self._both("has_unfinished", batch_id)

    def overdue(self, now: float) -> list[Task]:
        return self._both("overdue", now)

    def stale_running(self, now: float, lease_s: float | None) -> list[Task]:
        ref, sub = self.ref.stale_running(now, lease_s), self.sub.stale_running(now, lease_s)
        self._same("stale_running", _ids(ref), _ids(sub))
        return sub

    def running_over_limit(self) -> list[Task]:
        ref, sub = self.ref.running_over_limit(), self.sub.running_over_limit()
        self._same("running_over_limit", _ids(ref), _ids(sub))
        return sub

    def waiting_since_before(self, cutoff: float) -> list[Task]:
        ref, sub = self.ref.waiting_since_before(cutoff), self.sub.waiting_since_before(cutoff)
        self._same("waiting_since_before", _ids(ref), _ids(sub))
        return sub

    def dependents(self, task_id: str) -> list[Task]:
        return self._both("dependents", task_id)

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        return self._both("counts", batch_id)

    def put_batch(self, batch: Batch) -> Batch:
        return self._both("put_batch", batch)

    def get_batch(self, batch_id: str) -> Batch | None:
        return self._both("get_batch", batch_id)

    def batch_ids(self) -> list[str]:
        ref, sub = self.ref.batch_ids(), self.sub.batch_ids()
        self._same("batch_ids", sorted(ref), sorted(sub))
        return sub

    def batch_tasks(self, batch_id: str,
                    statuses: Iterable[TaskStatus] | None = None) -> list[Task]:
        wanted = None if statuses is None else tuple(statuses)
        return self._both("batch_tasks", batch_id, wanted)

    def next_ready_at(self, now: float) -> float | None:
        # MemoryStore moves due tasks out of its delay heap lazily, at the next claim, and
        # until then answers `now` for them. The durable stores answer the earliest
        # not_before still in the future (a due task is claimable or held back by something
        # a clock does not fix). Promote first so both answer the same question.
        self.ref._promote(now)
        return self._both("next_ready_at", now)

    def next_deadline(self) -> float | None:
        return self._both("next_deadline")

    def heartbeat(self, task_id: str, version: int, now: float) -> bool:
        return self._both("heartbeat", task_id, version, now)

    def running(self) -> list[Task]:
        return self._both("running")

    def all_tasks(self) -> list[Task]:
        return self._both("all_tasks")


class _DurableMachine(SchedulerMachine):
    """SchedulerMachine whose store is a DiffStore(MemoryStore, durable store)."""

    def __init__(self) -> None:
        super().__init__()
        self._closers: list[Any] = []

    def store_factory(self) -> DiffStore:  # type: ignore[override]
        return DiffStore(MemoryStore(), self.make_durable())

    def make_durable(self) -> Any:
        raise NotImplementedError

    def teardown(self) -> None:
        for close in reversed(self._closers):
            close()


class SQLiteMachine(_DurableMachine):
    def make_durable(self) -> Any:
        from taskfuse.store.sqlite import SQLiteStore

        tmp = Path(tempfile.mkdtemp(prefix="taskfuse-diff-"))
        store = SQLiteStore(tmp / "tasks.db")
        self._closers += [lambda: shutil.rmtree(tmp, ignore_errors=True), store.close]
        return store


class PostgresMachine(_DurableMachine):
    def make_durable(self) -> Any:
        from taskfuse.store.postgres import PostgresStore

        schema = new_schema()
        store = PostgresStore(pg_url(schema), pool_max=2)
        self._closers += [lambda: drop_schema(schema), store.close]
        return store


def _settings(n: int) -> settings:
    return settings(
        max_examples=examples(n),
        stateful_step_count=steps(40),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.mark.parametrize("replay", REPLAYS)
@pytest.mark.parametrize("machine", ["sqlite", "postgres"])
def test_regressions_replayed_on_durable_stores(machine: str, replay: Any) -> None:
    """The failing cases the scheduler machine keeps, on each durable store against memory."""
    if machine == "postgres":
        need_pg()
    state = {"sqlite": SQLiteMachine, "postgres": PostgresMachine}[machine]()
    try:
        replay(state)
    finally:
        state.teardown()


@pytest.mark.property
def test_sqlite_matches_memory() -> None:
    run_state_machine_as_test(SQLiteMachine, settings=_settings(60))


@pytest.mark.property
def test_postgres_matches_memory() -> None:
    need_pg()
    run_state_machine_as_test(PostgresMachine, settings=_settings(30))


# -- the Store protocol itself, driven directly ----------------------------------------------

EVENTS_FROM: dict[TaskStatus, list[TaskEvent]] = {}
for (_src, _event) in TRANSITIONS:
    EVENTS_FROM.setdefault(_src, []).append(_event)


class StoreMachine(RuleBasedStateMachine):
    """Random inserts, claims, moves (also with stale versions), heartbeats and time steps
    straight against the Store protocol; after each step every query is asked of both stores.

    The scheduler machine above reaches claims only now and then; this one makes claim order,
    caps, blocked downstreams, delays and dependency release the common case.
    """

    make_durable: Any = None

    def __init__(self) -> None:
        super().__init__()
        self._closers: list[Any] = []
        self.store = DiffStore(MemoryStore(), self.make_durable())
        self.now = 0.0
        self.n = 0
        self.batches: list[str] = []

    def teardown(self) -> None:
        for close in reversed(self._closers):
            close()

    def _ids(self) -> list[str]:
        return [t.task_id for t in self.store.ref.all_tasks()]

    @rule(data=st.data(), size=st.integers(1, 4))
    def insert(self, data: st.DataObject, size: int) -> None:
        existing = self._ids()
        tasks = []
        for _ in range(size):
            self.n += 1
            earlier = existing + [t.task_id for t in tasks]
            deps = data.draw(st.lists(st.sampled_from(earlier), max_size=2)) if earlier else []
            tasks.append(Task(
                task_id=f"t{self.n}",
                kind="k",
                trace_id=data.draw(st.sampled_from(["tr-a", "tr-b", f"tr{self.n}"])),
                idempotency_key=data.draw(st.sampled_from([None, None, "k1", "k2", f"u{self.n}"])),
                priority=data.draw(st.sampled_from([0, 0, 1])),  # ties are the interesting case
                created_at=self.now - data.draw(st.sampled_from([0.0, 0.0, 1.0])),
                not_before=data.draw(st.sampled_from([None, None, self.now, self.now + 2.0])),
                batch_id=data.draw(st.sampled_from([None, *self.batches, "loose"])),
                downstreams=data.draw(st.sampled_from([(), ("api",), ("api", "db")])),
                depends_on=tuple(deps),
                timeout=data.draw(st.sampled_from([2.0, 50.0])),
                payload=data.draw(st.sampled_from([None, {"sku": self.n}, [1, "x"]])),
                # a record built without pending_since, or stamped earlier than created
                pending_since=data.draw(st.sampled_from([None, self.now, self.now - 3.0])),
                # an attempt beyond max_retry is a record only an operator or a bug writes
                retry_count=data.draw(st.sampled_from([0, 0, 1, 2])),
                max_retry=data.draw(st.sampled_from([1, 3])),
            ))
        try:
            self.store.insert(tasks)
        except MissingDependency as exc:  # it depends on a task of this insert whose key
            # was known: answered with the stored task, that id is never written
            assert exc.missing in {t.task_id for t in tasks} - set(existing)
            assert self._ids() == existing

    @rule(cap=st.sampled_from([None, 1, 2]))
    def put_batch(self, cap: int | None) -> None:
        batch = f"b{len(self.batches)}"
        self.batches.append(batch)
        self.store.put_batch(Batch(batch, cap, self.now))

    @rule(worker=st.sampled_from(["w1", "w2"]), limit=st.integers(1, 4),
          blocked=st.sampled_from([frozenset(), frozenset({"api"}), frozenset({"db"})]))
    def claim(self, worker: str, limit: int, blocked: frozenset[str]) -> None:
        self.store.claim(worker, self.now, limit, blocked)

    def _draw_move(self, data: st.DataObject) -> tuple[Task, int] | None:
        """A legal move of some task and the version it expects (now and then a stale one)."""
        task = data.draw(st.sampled_from(self.store.ref.all_tasks()))
        events = EVENTS_FROM.get(task.status)
        if not events:
            return None
        event = data.draw(st.sampled_from(sorted(events)))
        changes: dict[str, Any] = {}
        if event in (TaskEvent.RETRY, TaskEvent.TIMEOUT_RETRY, TaskEvent.DEFER):
            changes["not_before"] = self.now + data.draw(st.sampled_from([0.0, 0.0, 3.0]))
        if event is TaskEvent.SUCCEED:
            changes["result"] = data.draw(st.sampled_from([None, "ok", {"rows": [1, 2]}]))
        if event in (TaskEvent.FAIL, TaskEvent.CANCEL):
            changes.update(error_kind="bad_params", error_msg="no")
        stale = data.draw(st.booleans())
        return move(task, event, self.now, **changes), task.version - 1 if stale else task.version

    @precondition(lambda self: bool(self.store.ref.all_tasks()))
    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        drawn = self._draw_move(data)
        if drawn is not None:
            self.store.swap(*drawn)

    @precondition(lambda self: bool(self.store.ref.all_tasks()))
    @rule(data=st.data(), size=st.integers(2, 6))
    def move_group(self, data: st.DataObject, size: int) -> None:
        """Several moves in one swap_many (a completer's group): successes that release
        children, retries that take a tick, stale ones, a task moved twice."""
        drawn = [self._draw_move(data) for _ in range(size)]
        moves = [m for m in drawn if m is not None]
        if moves:
            self.store.swap_many(moves)

    @precondition(lambda self: bool(self.store.ref.all_tasks()))
    @rule(data=st.data(), attempt=st.sampled_from([0, 0, -1, -2, 1]))
    def heartbeat(self, data: st.DataObject, attempt: int) -> None:
        """A heartbeat of the current attempt (0) or of another one: an older version (-1,
        -2: what an earlier attempt or a stale read holds), or one not reached yet (1). Of
        any task, so finished and waiting ones are asked too."""
        task = data.draw(st.sampled_from(self.store.ref.all_tasks()))
        renewed = self.store.heartbeat(task.task_id, task.version + attempt, self.now)
        assert renewed == (attempt == 0 and task.status is TaskStatus.RUNNING)

    @rule(dt=st.sampled_from([0.5, 1.0, 2.5, 7.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    # The watchdog's and the max-age questions, asked and acted on as the watchdog and the
    # sweeper do (the invariant asks them too: MemoryStore's heaps keep what they answer).

    @rule()
    def watchdog(self) -> None:
        for task in self.store.overdue(self.now):
            self.store.swap(move(task, TaskEvent.TIME_OUT, self.now), task.version)

    @rule(max_age=st.sampled_from([1.0, 5.0]))
    def expire_old(self, max_age: float) -> None:
        for task in self.store.waiting_since_before(self.now - max_age):
            self.store.swap(move(task, TaskEvent.EXPIRE, self.now), task.version)

    @invariant()
    def every_query_agrees(self) -> None:
        s, now = self.store, self.now
        s.all_tasks()
        s.counts()
        s.running()
        s.next_deadline()
        s.next_ready_at(now)
        s.stale_running(now, 3.0)
        s.stale_running(now, None)
        s.running_over_limit()
        s.waiting_since_before(now - 1.0)
        s.batch_ids()
        for batch in [*self.batches, "loose"]:
            s.counts(batch)
            s.get_batch(batch)
            s.batch_tasks(batch, (TaskStatus.PENDING, TaskStatus.RUNNING))
        for key in ("t1", "t2", "tr-a"):
            s.find(key)
            s.dependents(key)


class SQLiteStoreMachine(StoreMachine):
    def make_durable(self) -> Any:
        return SQLiteMachine.make_durable(self)  # type: ignore[arg-type]


class PostgresStoreMachine(StoreMachine):
    def make_durable(self) -> Any:
        return PostgresMachine.make_durable(self)  # type: ignore[arg-type]


@pytest.mark.property
def test_sqlite_store_protocol_matches_memory() -> None:
    run_state_machine_as_test(SQLiteStoreMachine, settings=_settings(150))


@pytest.mark.property
def test_postgres_store_protocol_matches_memory() -> None:
    need_pg()
    run_state_machine_as_test(PostgresStoreMachine, settings=_settings(30))
