"""Task programs of a `process` kind: run inside the runtime's own task process.

A kind whose limits say `executor: process` is not run on the worker thread: the runtime
(taskfuse.runtime.procexec) hands each attempt to a task process and kills that process at
the attempt's timeout or cancel. To test that path for real, the load test registers this
module's `run_task` for such a kind (the runtime finds it by `module:qualname`, as it finds
any user's process task) and lets the runtime do the rest. Inside the task process:

- `work` and `hang` steps block the process (`time.sleep`), deaf to the stop signal: a hang
  ends only when the runtime kills the process, as a hung socket read in a vendor SDK would;
- a `call` step makes its HTTP requests from the task process as a thread task does,
  `ctx.downstream(name).call(request)` (client.py's `counted_call`): each attempt admitted
  by the worker's fuses (breaker, bulkhead, token bucket, fleet permits) and timed here,
  the client's timeout, retries, backoff and budget decided by the worker's call client;
- a `db` step cannot run: `ctx.pool` belongs to the worker. `world_of` refuses such a
  program before anything starts.

The worker counts the calls from the runtime's own call events (`ProcessTasks`), since the
task process shares no memory with it; the retries and breaker refusals, which no event
tells apart, the task processes count in the counters file (`tallies`).

Draws follow the simulator's streams: the n-th attempt to reach step k of a program takes
the n-th value of that step's seeded stream, as on a thread and in the simulator, so the
same attempts hang (a stream per attempt would change how many do, and the makespan with
them). The worker draws each step's values before the run (`world_of`); the task processes
share one counter per step, a file under an exclusive lock.

The world (programs, their draws, downstream URLs, where the tallies are) is a JSON file the worker
writes before the run; the payload of each task names it and the program.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from lab.loadtest.client import counted_call
from lab.loadtest.connections import CallBroken, CallTimeout, Connections
from lab.model.provider import TIMEOUT
from lab.scenario import (
    CallStep,
    CpuStep,
    DbStep,
    HangStep,
    Scenario,
    ScenarioError,
    Step,
    WorkStep,
)
from taskfuse.core.events import THREAD_WAIT
from taskfuse.core.retry import ErrorKind
from taskfuse.runtime import TaskError

_STEPS: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


def world_of(scaled: Scenario, programs: dict[int, tuple[list[Step], int]],
             urls: dict[str, str], seed: int, counters: str) -> dict[str, Any]:
    """What a task process needs to run the programs of `process` kinds (JSON-able):
    `programs` maps the simulator's program index to its steps and the most attempts that
    may run it; `counters` is a file of one counter per step."""
    drawn: dict[str, list[list[float]]] = {}
    for index, (steps, attempts) in programs.items():
        if any(isinstance(step, DbStep) for step in steps):
            raise ScenarioError("a kind with executor: process has a db step: the load test "
                                "cannot run it in a task process (a pool belongs to the "
                                "worker); use executor: thread for it")
        drawn[str(index)] = [_draws(step, random.Random(f"{seed}:program:{index}:{k}"),
                                    attempts) for k, step in enumerate(steps)]
    slots = sum(len(steps) for steps, _ in programs.values())
    names = sorted(scaled.downstreams)
    Path(counters).write_bytes(bytes(8 * (slots + 2 * len(names))))
    return {
        "counters": counters,
        "tallies": {name: slots + 2 * i for i, name in enumerate(names)},
        "programs": {i: _STEPS.dump_python(steps, mode="json")
                     for i, (steps, _) in programs.items()},
        "draws": drawn,
        "downstreams": {name: {"url": urls[name]} for name in names},
    }


def _draws(step: Step, rng: random.Random, n: int) -> list[float]:
    """The step's first `n` values, drawn as the simulator draws them from its stream: a
    duration, a call count, or a hang's duration (0: this attempt does not hang)."""
    if isinstance(step, (WorkStep, CpuStep)):
        work = (step.work if isinstance(step, WorkStep) else step.cpu).sampler(rng)
        return [work() for _ in range(n)]
    if isinstance(step, CallStep):
        count = step.call.count.sampler(rng)
        return [float(int(count() + 0.5)) for _ in range(n)]
    assert isinstance(step, HangStep)
    p, duration = step.hang.probability, step.hang.duration.sampler(rng)
    return [duration() if rng.random() < p else 0.0 for _ in range(n)]


# -- in the task process -------------------------------------------------------------------


@dataclass
class _World:
    programs: dict[str, list[Step]]
    draws: dict[str, list[list[float]]]
    slots: dict[str, int]  # a program's first counter
    counters: int  # file descriptor of the counters
    tallies: dict[str, int]  # a downstream's first counter: retries, then breaker refusals
    http: dict[str, Connections] = field(default_factory=dict)

    def draw(self, program: str, k: int) -> float:
        """The next value of step k's stream: the n-th for the n-th attempt to get here."""
        n = _bump(self.counters, self.slots[program] + k)
        values = self.draws[program][k]
        return values[n % len(values)]  # past the most attempts foreseen: around again

    def counter(self, name: str) -> Callable[[bool, bool], None]:
        """`counted_call`'s count for downstream `name`, kept in the counters file."""
        first = self.tallies[name]

        def count(retried: bool, rejected: bool) -> None:
            if retried:
                _bump(self.counters, first)
            if rejected:
                _bump(self.counters, first + 1)

        return count


def _bump(fd: int, slot: int) -> int:
    """Add one to counter `slot` of the file, under an exclusive lock; answer its old value."""
    at = 8 * slot
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        (n,) = struct.unpack("<q", os.pread(fd, 8, at))
        os.pwrite(fd, struct.pack("<q", n + 1), at)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return int(n)


def tallies(world_path: str) -> dict[str, tuple[int, int]]:
    """What the task processes counted, by downstream: (retries, breaker refusals)."""
    world = json.loads(Path(world_path).read_text())
    data = Path(world["counters"]).read_bytes()
    return {name: struct.unpack_from("<qq", data, 8 * first)
            for name, first in world["tallies"].items()}


_WORLDS: dict[str, _World] = {}


def _world(path: str) -> _World:
    world = _WORLDS.get(path)
    if world is None:
        data = json.loads(Path(path).read_text())
        programs = {i: _STEPS.validate_python(p) for i, p in data["programs"].items()}
        slots, first = {}, 0
        for i, steps in programs.items():
            slots[i], first = first, first + len(steps)
        world = _WORLDS[path] = _World(
            programs, data["draws"], slots, os.open(data["counters"], os.O_RDWR),
            data["tallies"])
        world.http = {n: Connections(d["url"]) for n, d in data["downstreams"].items()}
    return world


def run_task(ctx: Any, payload: dict[str, Any]) -> None:
    """The task function of every `process` kind (runs in a task process; module doc)."""
    world = _world(payload["world"])
    program = str(payload["program"])
    steps = world.programs[program]
    for k, step in enumerate(steps):
        value = world.draw(program, k)
        if isinstance(step, CallStep):
            for _ in range(int(value)):
                _call(ctx, world, step.call.downstream)
        elif value > 0:  # work, or a hang (deaf to the stop signal: only a kill ends it)
            time.sleep(value)
    # No `ctx.cancelled()` between steps (a round trip to the worker each): a stopped
    # attempt's process is killed, which ends it sooner than a look between steps would.


def _call(ctx: Any, world: _World, name: str) -> None:
    """One logical call through the worker's fuses and client; a failed attempt's error kind
    is what the client's policy judges."""
    headers = {"traceparent": ctx.traceparent()}
    http = world.http[name]

    def request(timeout: float | None = None) -> None:
        began = time.monotonic()
        try:
            status, kind, _ = http.get(headers, timeout)
        except CallTimeout:
            raise TaskError(TIMEOUT, f"{name}: no answer within {timeout}s") from None
        except CallBroken:
            raise TaskError(ErrorKind.CONNECTION_RESET, f"{name}: connection broken") from None
        if timeout is not None and time.monotonic() - began > timeout:
            raise TaskError(TIMEOUT, f"{name}: answered after the client's timeout")
        if status >= 400:
            raise TaskError(kind or f"http_{status}", f"{name}: HTTP {status}")

    counted_call(ctx, name, request, world.counter(name))


# -- in the worker -------------------------------------------------------------------------


class ProcessTasks:
    """The worker's count of what `process` kinds did, from the runtime's events (scenario
    seconds): attempts and first queue waits from the claims, calls from the call events."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.created: dict[str, float] = {}
        self.attempts = 0
        self.first_waits: list[float] = []
        #: Where a first attempt's wait is in first_waits, until its thread takes it.
        self._first: dict[str, int] = {}
        #: (start, end) of every call by downstream: calls in flight at once are counted from
        #: these at the end, since a call's event comes only when it ended.
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.lock = threading.Lock()

    def add(self, task_ids: list[str]) -> None:
        with self.lock:
            self.ids.update(task_ids)

    def event(self, event: Any, calls: dict[str, Any]) -> None:
        """One runtime event (already in scenario seconds)."""
        if event.task_id not in self.ids:
            return
        kind = event.kind
        if kind == "submit":
            with self.lock:
                self.created.setdefault(event.task_id, event.t)
        elif kind == "move" and event.reason == "claim":
            with self.lock:
                self.attempts += 1
                created = self.created.pop(event.task_id, None)
                if created is not None:
                    self._first[event.task_id] = len(self.first_waits)
                    self.first_waits.append(event.t - created)
        elif kind == "move":  # the attempt ended: it took its thread without a wait
            with self.lock:
                self._first.pop(event.task_id, None)
        elif kind == "wait" and event.reason == THREAD_WAIT:
            with self.lock:  # a first attempt's wait for a thread is still queueing
                at = self._first.pop(event.task_id, None)
                if at is not None:
                    self.first_waits[at] += event.value or 0.0
        elif kind == "call" and event.subject in calls:
            stats, latency = calls[event.subject], event.value or 0.0
            stats.sent(event.t - latency)
            stats.received(None if event.reason == "ok" else event.reason, latency)
            with self.lock:
                self.spans.setdefault(event.subject, []).append((event.t - latency, event.t))

    def max_in_flight(self, name: str) -> int:
        """Most calls of process tasks to `name` in flight at once."""
        edges = sorted([(a, 1) for a, _ in self.spans.get(name, [])]
                       + [(b, -1) for _, b in self.spans.get(name, [])])
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most
