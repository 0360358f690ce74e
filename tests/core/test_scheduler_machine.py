"""The scheduler driven by hypothesis through random lifecycles, checking invariants each step.

The machine submits tasks (alone, in capped batches, as DAGs, with duplicate idempotency
keys), claims, completes with success / retryable / fatal errors / breaker refusals (also
late, after the task moved on), cancels, expires, sweeps, releases and advances time. After
every step it recounts everything from the store and compares.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from taskfuse.core.breaker import BreakerConfig, CircuitBreaker
from taskfuse.core.dag import MissingDependency
from taskfuse.core.events import EventKind, EventList
from taskfuse.core.guard import Guard
from taskfuse.core.metrics import NO_BATCH, MetricsAggregator, percentile
from taskfuse.core.retry import Backoff, RetryPolicy
from taskfuse.core.scheduler import Completed, LostRace, Scheduler, SchedulerConfig, Work
from taskfuse.core.states import TERMINAL, TRANSITIONS, TaskStatus, derive_batch_status
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.store.memory import MemoryStore
from tests.core.replay import Draws, checked
from tests.scale import examples, steps

LEGAL_PAIRS = {(s.value, d.value) for (s, _), d in TRANSITIONS.items()}
OUTCOMES = {
    "ok": Outcome.success("done"),
    "retryable": Outcome.failure("http_503", "unavailable"),
    "fatal": Outcome.failure("bad_params", "bad sku"),
    "breaker": Outcome.failure("breaker_open", "refused by breaker"),
}


def make_store():  # replaced by the differential store tests with other stores
    return MemoryStore()


class SchedulerMachine(RuleBasedStateMachine):
    store_factory = staticmethod(make_store)

    @initialize(seed=st.integers(0, 2**16), lease=st.sampled_from([None, 5.0]))
    def setup(self, seed: int, lease: float | None) -> None:
        self.now = 0.0
        self.events = EventList()
        self.metrics = MetricsAggregator()
        policy = RetryPolicy(max_retry=2, backoff=Backoff(base=1.0, cap=8.0))
        self.sched = Scheduler(
            self.store_factory(),
            policy=policy,
            config=SchedulerConfig(default_timeout=10.0, lease_s=lease, max_pending_age_s=200),
            rng=random.Random(seed),
            sinks=[self.events, self.metrics],
        )
        self.breaker = CircuitBreaker(
            BreakerConfig(failure_rate=0.5, window_size=4, minimum_calls=2, open_wait_s=7,
                          half_open_probes=1)
        )
        self.sched.add_guard(Guard("api", breaker=self.breaker))
        self.held: dict[str, list[Task]] = {"w1": [], "w2": [], "w3": []}
        self.terminal_seen: dict[str, TaskStatus] = {}
        self.batches: dict[str, int] = {}
        self.n = 0

    # -- helpers ---------------------------------------------------------------------------

    def _ids(self) -> list[str]:
        return [t.task_id for t in self.sched.store.all_tasks()]

    def _spec(self, data, batch: str | None = None, deps=()) -> TaskSpec:
        self.n += 1
        key = data.draw(st.sampled_from([None, None, "k1", "k2", f"u{self.n}"]))
        return TaskSpec(
            kind=data.draw(st.sampled_from(["sync", "image"])),
            task_id=f"t{self.n}",
            idempotency_key=key,
            priority=data.draw(st.integers(0, 2)),
            timeout=data.draw(st.sampled_from([None, 3.0, 30.0])),
            downstreams=data.draw(st.sampled_from([(), ("api",)])),
            depends_on=tuple(deps),
            batch_id=batch,
        )

    # -- rules -----------------------------------------------------------------------------

    @rule(data=st.data())
    def submit(self, data) -> None:
        ids = self._ids()
        deps = data.draw(st.lists(st.sampled_from(ids), max_size=2, unique=True)) if ids else []
        self.sched.submit(self._spec(data, deps=deps), self.now)

    @rule(data=st.data(), size=st.integers(1, 4), cap=st.sampled_from([None, 1, 2]))
    def submit_batch(self, data, size: int, cap: int | None) -> None:
        batch = f"b{len(self.batches)}"
        self.batches[batch] = cap or 10**9
        specs = [self._spec(data, batch) for _ in range(size)]
        if size > 1 and data.draw(st.booleans()):  # a small fan-out DAG inside the batch
            specs[1:] = [
                TaskSpec(**{**_fields(s), "depends_on": (specs[0].task_id,)}) for s in specs[1:]
            ]
        before = self._ids()
        try:
            self.sched.submit_batch(specs, self.now, batch, cap=cap)
        except MissingDependency as exc:
            # the fan-out's root carried a key the store holds: it is answered with the
            # stored task, not written under its own id, so its dependents would wait for
            # an id nobody holds. The store refuses the whole submission instead.
            root = specs[0]
            assert exc.missing == root.task_id and root.idempotency_key is not None
            assert self._ids() == before

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]), n=st.integers(1, 3))
    def claim(self, worker: str, n: int) -> None:
        blocked = self.sched.blocked(self.now)
        answer = self.sched.claim(worker, self.now, n)
        if not isinstance(answer, Work):
            return
        for task in answer.tasks:
            assert task.status is TaskStatus.RUNNING and task.worker_id == worker
            for dep in task.depends_on:
                assert self.sched.store.get(dep).status is TaskStatus.SUCCESS
            assert blocked.isdisjoint(task.downstreams)
            for other, tasks in self.held.items():
                assert all(
                    not (t.task_id == task.task_id and self._current(t)) for t in tasks
                ), f"{task.task_id} held by {other} and {worker}"
            self.held[worker].append(task)

    def _current(self, task: Task) -> bool:
        stored = self.sched.store.get(task.task_id)
        return stored is not None and stored.version == task.version

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data(), outcome=st.sampled_from(sorted(OUTCOMES)))
    def complete(self, data, outcome: str) -> None:
        worker = data.draw(st.sampled_from([w for w, ts in self.held.items() if ts]))
        task = self.held[worker].pop(data.draw(st.integers(0, len(self.held[worker]) - 1)))
        was_current = self._current(task)
        answer = self.sched.complete(task, OUTCOMES[outcome], self.now)
        if was_current:
            assert isinstance(answer, Completed)
        else:  # a late result: the task moved on; it must not resurrect anything
            assert isinstance(answer, LostRace)

    @rule(ok=st.booleans())
    def api_call(self, ok: bool) -> None:
        if self.breaker.allow(self.now):
            self.breaker.record(self.now, ok)

    @precondition(lambda self: len(self._ids()) > 0)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        self.sched.cancel(data.draw(st.sampled_from(self._ids())), self.now, "by test")

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data())
    def cancel_batch(self, data) -> None:
        self.sched.cancel_batch(data.draw(st.sampled_from(sorted(self.batches))), self.now)

    @rule()
    def expire(self) -> None:
        for task in self.sched.expire(self.now):
            assert task.status in (TaskStatus.TIMEOUT, TaskStatus.PENDING)

    @rule()
    def sweep(self) -> None:
        """A pass applies the three rules and leaves nothing any rule still applies to; it
        cancels only what waited longer than the max age, never what it just requeued."""
        config = self.sched.config
        before = {t.task_id: t for t in self.sched.store.all_tasks()}
        for task in self.sched.sweep(self.now):
            if task.status is TaskStatus.CANCELED:  # rule 2 only ever cancels
                was = before[task.task_id]
                assert was.status is TaskStatus.PENDING, f"{task.task_id} requeued and canceled"
                assert self.now - was.waiting_since > config.max_pending_age_s
        lease = config.lease_s
        for task in self.sched.store.all_tasks():
            if task.status is TaskStatus.PENDING:
                assert self.now - task.waiting_since <= config.max_pending_age_s
            elif task.status is TaskStatus.RUNNING:
                assert task.retry_count <= task.max_retry
                assert task.started_at + 2 * task.timeout >= self.now
                assert lease is None or task.heartbeat_at + lease >= self.now

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def release(self, data) -> None:
        worker = data.draw(st.sampled_from([w for w, ts in self.held.items() if ts]))
        task = self.held[worker].pop()
        was_current = self._current(task)
        released = self.sched.release(task, self.now)
        assert (released is not None) == was_current  # a stale attempt releases nothing

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        """Any attempt a worker still holds, current or stale: only the current one is
        answered "yours", and a stale one's heartbeat and check change nothing."""
        worker = data.draw(st.sampled_from([w for w, ts in self.held.items() if ts]))
        task = data.draw(st.sampled_from(self.held[worker]))
        current = self._current(task) and task.status is TaskStatus.RUNNING
        before = self.sched.store.get(task.task_id)
        assert self.sched.heartbeat(task, self.now) == current
        assert self.sched.is_cancelled(task) == (not current)
        if not current:
            assert self.sched.store.get(task.task_id) == before

    @rule(dt=st.sampled_from([0.5, 1.0, 4.0, 12.0, 30.0, 250.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def only_table_moves(self) -> None:
        for e in self.events.events:
            if e.kind == EventKind.MOVE:
                assert (str(e.src), str(e.dst)) in LEGAL_PAIRS, e

    @invariant()
    def terminals_never_change(self) -> None:
        for task in self.sched.store.all_tasks():
            seen = self.terminal_seen.get(task.task_id)
            if seen is not None:
                assert task.status is seen, f"{task.task_id} left terminal {seen}"
            elif task.status in TERMINAL:
                self.terminal_seen[task.task_id] = task.status

    @invariant()
    def retries_bounded_and_states_counted(self) -> None:
        tasks = self.sched.store.all_tasks()
        recount = dict.fromkeys(TaskStatus, 0)
        for task in tasks:
            assert 0 <= task.retry_count <= task.max_retry
            recount[task.status] += 1
        assert self.sched.counts() == recount
        assert sum(recount.values()) == len(tasks)

    @invariant()
    def pending_since_is_the_last_move_into_pending(self) -> None:
        """What the sweeper's max age counts from: the time of the task's last SUBMIT or
        move into PENDING (retry, timeout retry, orphan retry, release, defer)."""
        last: dict[str, float] = {}
        for e in self.events.events:
            if e.dst == TaskStatus.PENDING and e.kind in (EventKind.SUBMIT, EventKind.MOVE):
                last[e.task_id] = e.t
        for task in self.sched.store.all_tasks():
            if task.status is TaskStatus.PENDING:
                assert task.pending_since == last[task.task_id], task

    @invariant()
    def running_only_after_dependencies(self) -> None:
        store = self.sched.store
        for task in store.all_tasks():
            if task.status in (TaskStatus.RUNNING, TaskStatus.SUCCESS):
                assert all(store.get(d).status is TaskStatus.SUCCESS for d in task.depends_on)

    @invariant()
    def batches_derive_and_respect_caps(self) -> None:
        store = self.sched.store
        for batch, cap in self.batches.items():
            tasks = store.batch_tasks(batch)
            recount = dict.fromkeys(TaskStatus, 0)
            for t in tasks:
                recount[t.status] += 1
            assert self.sched.batch_status(batch) == derive_batch_status(recount)
            assert recount[TaskStatus.RUNNING] <= cap

    @invariant()
    def metrics_match_recount(self) -> None:
        tasks = self.sched.store.all_tasks()
        by = {s: sum(1 for t in tasks if t.status is s) for s in TaskStatus}
        assert self.metrics.running == by[TaskStatus.RUNNING]
        assert self.metrics.queue_depth == by[TaskStatus.PENDING]
        done = by[TaskStatus.SUCCESS] + by[TaskStatus.FAILED]
        expected_rate = None if done == 0 else by[TaskStatus.SUCCESS] / done
        assert self.metrics.success_rate == expected_rate
        durations: dict[str, list[float]] = {}
        for t in tasks:
            if t.status in TERMINAL and t.started_at is not None:
                durations.setdefault(t.batch_id or NO_BATCH, []).append(
                    t.finished_at - t.started_at
                )
        assert self.metrics.snapshot().p99_by_batch == {
            b: percentile(d, 99) for b, d in durations.items()
        }


def _fields(spec: TaskSpec) -> dict:
    return {name: getattr(spec, name) for name in TaskSpec.__slots__}


SchedulerMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=steps(40),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSchedulerMachine = pytest.mark.property(SchedulerMachine.TestCase)


# -- failing cases hypothesis found, replayed as they were printed ---------------------------
# `make property` runs the machine longer and randomized; every case it fails on is kept here
# (and in the example database it writes), so `make test` checks it on every run.


def replay_stale_heartbeat_after_timeout(machine: SchedulerMachine) -> None:
    """Issue 18: w1 claims t1, the watchdog times it out and retries it, w1 claims t1 again,
    and the first attempt's heartbeat renewed the lease of the second."""
    step = checked(machine)
    step(lambda: machine.setup(seed=0, lease=None))
    step(lambda: machine.submit(data=Draws(None, "sync", 0, 3.0, ())))
    step(lambda: machine.claim(n=1, worker="w1"))
    step(lambda: machine.advance(dt=4.0))
    step(lambda: machine.expire())
    step(lambda: machine.advance(dt=12.0))
    step(lambda: machine.claim(n=1, worker="w1"))
    first, second = machine.held["w1"]
    assert (first.task_id, first.worker_id) == (second.task_id, second.worker_id)
    step(lambda: machine.heartbeat(data=Draws("w1", first)))
    step(lambda: machine.heartbeat(data=Draws("w1", second)))
    step(lambda: machine.release(data=Draws("w1")))  # pops the second: still current
    step(lambda: machine.complete(data=Draws("w1", 0), outcome="ok"))  # the first: too late


def replay_stale_heartbeat_after_sweep(machine: SchedulerMachine) -> None:
    """The same bug reached through the sweeper (found by the 10x randomized run)."""
    step = checked(machine)
    step(lambda: machine.setup(seed=0, lease=None))
    step(lambda: machine.submit_batch(
        cap=None, size=2,
        data=Draws(None, "sync", 0, None, (), None, "sync", 0, None, (), False)))
    step(lambda: machine.submit(data=Draws([], None, "sync", 0, None, ())))
    step(lambda: machine.claim(n=2, worker="w2"))
    step(lambda: machine.claim(n=1, worker="w1"))
    step(lambda: machine.advance(dt=30.0))
    step(lambda: machine.sweep())
    step(lambda: machine.cancel_batch(data=Draws("b0")))
    step(lambda: machine.claim(n=1, worker="w1"))
    step(lambda: machine.heartbeat(data=Draws("w1", lambda: machine.held["w1"][0])))


def replay_stale_heartbeat_with_a_dependent(machine: SchedulerMachine) -> None:
    """The timeout case as `make property` found and shrank it (its example database entry
    is in tests/hypothesis-examples), with a dependent task waiting on t1."""
    step = checked(machine)
    step(lambda: machine.setup(seed=0, lease=None))
    step(lambda: machine.submit_batch(cap=None, size=1, data=Draws(None, "sync", 0, None, ())))
    step(lambda: machine.claim(n=1, worker="w1"))
    step(lambda: machine.submit(data=Draws(["t1"], None, "sync", 0, None, ())))
    step(lambda: machine.advance(dt=12.0))
    step(lambda: machine.expire())
    step(lambda: machine.advance(dt=0.5))
    step(lambda: machine.claim(n=1, worker="w1"))
    step(lambda: machine.heartbeat(data=Draws("w1", lambda: machine.held["w1"][0])))


REPLAYS = [replay_stale_heartbeat_after_timeout, replay_stale_heartbeat_after_sweep,
           replay_stale_heartbeat_with_a_dependent]


@pytest.mark.parametrize("replay", REPLAYS)
def test_regression_replayed(replay) -> None:
    replay(SchedulerMachine())
