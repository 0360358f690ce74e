"""When a batch's tasks arrive and what each arrival submits: one copy for every driver.

The simulator waits for an arrival in virtual time, the load test in real time; both ask
this module *when* (`arrivals`) and *what* (`TaskFactory`), so the same seed gives the same
arrival times, task ids, DAG children and idempotency keys in a simulation and in a real
run. Business requests arrive by the same Poisson clock (`poisson_times`, which `arrivals`
uses too). Arrival times are generated lazily, one at a time: a Poisson batch of a million
tasks never holds a million timestamps.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from lab.model.cron import cron_arrivals
from lab.scenario import Arrival, BatchSpec, CallStep, Scenario, Step
from taskfuse.core.task import TaskSpec


def arrivals(arrival: Arrival, count: int, horizon_s: float,
             rng: random.Random) -> Iterator[tuple[float, int, int]]:
    """`(time, first, end)` groups: tasks `first..end-1` arrive at `time`.

    closed: one group of all `count` at start_s. poisson: one task per group, gaps drawn from
    `rng` at `rate`. schedule: Poisson whose rate changes at each step's at_s; a gap that
    would cross a change is drawn again from the change (memorylessness makes that exact).
    Stops at `count` tasks or at the horizon, whichever comes first.
    """
    start = arrival.start_s
    if arrival.kind == "cron":  # a batch at each tick of a schedule (lab.model.cron)
        yield from cron_arrivals(arrival, count, horizon_s)
        return
    if arrival.kind == "closed":
        if count:
            yield start, 0, count
        return
    if count <= 0:
        return
    times = poisson_times(arrival.rate or 0.0, [(s.at_s, s.rate) for s in arrival.steps],
                          rng, start, horizon_s)
    for i, at in enumerate(times):
        yield at, i, i + 1
        if i + 1 >= count:
            return


def poisson_times(rate: float, steps: Sequence[tuple[float, float]], rng: random.Random,
                  start: float = 0.0, until: float = math.inf) -> Iterator[float]:
    """Arrival times of a Poisson stream from `start`: gaps drawn from `rng` at the rate in
    force (`rate`, then each `(at_s, rate)` step from its time on). A gap that would cross a
    change is drawn again from the change (memorylessness makes that exact). No gap is drawn
    from a time at or past `until`; a rate of 0 with no change to come ends the stream.

    One copy for the batches' arrivals, the simulated business traffic and the load test's.
    """
    expo = rng.expovariate
    steps = sorted(steps)
    at = start
    if not steps:  # a constant rate: the tight loop
        if rate <= 0:
            return
        while at < until:
            at += expo(rate)
            yield at
        return
    while at < until:
        now_rate = rate_at(rate, steps, at)
        change = next((t for t, _ in steps if t > at), None)
        gap = expo(now_rate) if now_rate > 0 else math.inf
        if change is not None and at + gap >= change:
            at = change
            continue
        if gap == math.inf:
            return
        at += gap
        yield at


def rate_at(base: float, steps: list[tuple[float, float]], now: float) -> float:
    """The Poisson rate in force at `now`: the last step at or before it, else `base`."""
    rate = base
    for at, r in steps:
        if at <= now:
            rate = r
    return rate


def guarded(program: Sequence[Step], scenario: Scenario) -> tuple[str, ...]:
    """The downstreams with a breaker or a bulkhead that a program calls, in the order first
    called: a task's `downstreams`, as an app declares them. Its tasks wait PENDING while one
    of those breakers is open (the scheduler's gating), and a claim brings none of them while
    the bulkhead is full of tasks its worker holds (`claim_room`)."""
    names: list[str] = []
    for step in program:
        if isinstance(step, CallStep):
            name = step.call.downstream
            client = scenario.downstreams[name].client
            if (client.breaker is not None or client.bulkhead is not None) \
                    and name not in names:
                names.append(name)
    return tuple(names)


class TaskFactory:
    """The task specs of one arrival of a batch: the task and its DAG children.

    `payload` is what the driver runs for the batch's program (the simulator passes its
    compiled program's index, the load test the compiled program itself); `child_payloads`
    the same for each child spec, in order. Ids are `BATCH-i` and `BATCH-i.KINDj`; a batch
    with duplicates keys its tasks by id so a resubmission deduplicates.
    """

    def __init__(self, batch: BatchSpec, scenario: Scenario, payload: Any,
                 child_payloads: Sequence[Any], seed: int) -> None:
        self.batch = batch
        self.payload = payload
        self.guarded = guarded(batch.program, scenario)
        self.children = [(child, p, guarded(child.program, scenario))
                         for child, p in zip(batch.children, child_payloads, strict=True)]
        self._rng = random.Random(f"{seed}:children:{batch.id}")
        self.keyed = batch.duplicates > 0

    def __call__(self, i: int) -> list[TaskSpec]:
        b = self.batch
        tid = f"{b.id}-{i}"
        out = [TaskSpec(b.kind, self.payload, tid, b.id, None, tid if self.keyed else None, (),
                        b.priority, b.max_retry, b.timeout_s, None, self.guarded)]
        for child, payload, child_guarded in self.children:
            n = int(child.count.sampler(self._rng)() + 0.5)
            out += [TaskSpec(child.kind, payload, f"{tid}.{child.kind}{j}", b.id, None, None,
                             (tid,), b.priority, b.max_retry, b.timeout_s, None, child_guarded)
                    for j in range(n)]
        return out

    def many(self, first: int, end: int) -> list[TaskSpec]:
        """The specs of tasks first..end-1, in order (a closed batch's one submission)."""
        return [spec for i in range(first, end) for spec in self(i)]


def duplicate(spec: TaskSpec) -> TaskSpec:
    """A second submission of a keyed task (same key, its own id): deduplicated on insert."""
    fields = {name: getattr(spec, name) for name in TaskSpec.__slots__}
    return TaskSpec(**{**fields, "task_id": f"{spec.task_id}~dup"})


def duplicates_of(specs: Sequence[TaskSpec], batch: BatchSpec, seed: int) -> list[TaskSpec]:
    """Which specs of one arrival are submitted twice, drawn from a stream of that arrival."""
    if not batch.duplicates or not specs:
        return []
    dup = random.Random(f"{seed}:duplicates:{batch.id}:{specs[0].task_id}").random
    return [duplicate(s) for s in specs if s.idempotency_key and dup() < batch.duplicates]
