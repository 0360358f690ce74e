"""One event schema for every move, breaker change, wait, call and alert.

Events are NamedTuples: immutable and named, yet cheap to build on the hot path (a frozen
dataclass costs about three times as much). Sinks that want richer records convert at the
edge (the trace writer, the Prometheus exporter, the log formatter).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from taskfuse.core.task import Task


class EventKind(StrEnum):
    SUBMIT = "submit"  # a task was created (dst PENDING); a dedupe hit emits nothing
    MOVE = "move"  # a status move through the table (src -> dst, reason)
    BREAKER = "breaker"  # a circuit breaker changed state (subject = downstream)
    WAIT = "wait"  # something waited: a token bucket, a bulkhead, a pool (value = seconds)
    CALL = "call"  # a downstream call ended (subject = downstream, reason = outcome kind)
    ALERT = "alert"  # an alert rule fired (dst "firing") or resolved (dst "resolved")
    LIMIT = "limit"  # an adaptive limit changed (subject = downstream, value = new limit)
    QUERY = "query"  # a DB step's query ended (subject = pool, value = seconds it held it)


class Event(NamedTuple):
    """One thing that happened at time `t`. Unused fields stay None."""

    t: float
    kind: str
    task_id: str | None = None
    batch_id: str | None = None
    trace_id: str | None = None
    src: str | None = None
    dst: str | None = None
    reason: str | None = None
    attempt: int | None = None
    worker: str | None = None
    subject: str | None = None
    value: float | None = None


EventSink = Callable[[Event], None]

#: A WAIT's reason when a claimed (prefetched) task waited for a worker thread to take it.
THREAD_WAIT = "thread"


def thread_wait(task: Task, now: float, waited: float) -> Event:
    """The WAIT of an attempt claimed ahead that a worker took `waited` seconds after its
    claim: both drivers report it, so run times count from when its code began."""
    return Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id, None, None,
                 THREAD_WAIT, task.retry_count + 1, task.worker_id, "threads", waited)

#: A WAIT's reason when a claimed task of an `async` kind waited for a coroutine slot on its
#: worker's event loop (subject "coroutines").
SLOT_WAIT = "slot"
#: A WAIT's reason when a coroutine that had CPU work to do waited for its event loop, busy
#: running another one (subject "loop"): the loop's lag.
LOOP_WAIT = "loop"


def slot_wait(task: Task, now: float, waited: float) -> Event:
    """The WAIT of an async attempt claimed while every coroutine slot was taken."""
    return Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id, None, None,
                 SLOT_WAIT, task.retry_count + 1, task.worker_id, "coroutines", waited)


def loop_wait(task: Task, now: float, waited: float) -> Event:
    """The WAIT of a coroutine for its event loop, held by other coroutines' CPU work."""
    return Event(now, EventKind.WAIT, task.task_id, task.batch_id, task.trace_id, None, None,
                 LOOP_WAIT, task.retry_count + 1, task.worker_id, "loop", waited)


_ALWAYS = frozenset({"t", "kind"})

#: The one schema of events, by kind: the fields each always carries (REQUIRED) and those it
#: may carry (OPTIONAL); every other field stays None. One meaning per field, whoever emits:
#: `value` is seconds for WAIT (time waited) and CALL (the call's latency), the new limit for
#: LIMIT, the measured value for ALERT and the query's seconds for QUERY (`reason` "kept": the
#: task keeps the connection to its end, "returned": given back at once; no task fields for a
#: business request's query); `attempt` is the task's 1-based attempt; `subject`
#: names the downstream, pool, gateway or alert rule; `reason` is the outcome kind of a CALL
#: ("ok" or an error kind), what was waited for in a WAIT ("bulkhead", "pool",
#: "pool_timeout", "thread": a claimed task's wait for a worker thread, subject "threads";
#: "slot": for a coroutine slot, subject "coroutines"; "loop": for a busy event loop, subject
#: "loop"),
#: why a MOVE or BREAKER change happened. A trace keeps `trace_id` only on SUBMIT events
#: (a task's trace id never changes); in memory every task event carries it.
REQUIRED: dict[str, frozenset[str]] = {
    EventKind.SUBMIT: _ALWAYS | {"task_id", "trace_id", "dst", "attempt"},
    EventKind.MOVE: _ALWAYS | {"task_id", "src", "dst", "reason", "attempt"},
    EventKind.BREAKER: _ALWAYS | {"src", "dst", "reason", "subject"},
    EventKind.WAIT: _ALWAYS | {"task_id", "reason", "attempt", "subject", "value"},
    EventKind.CALL: _ALWAYS | {"task_id", "reason", "attempt", "subject", "value"},
    EventKind.ALERT: _ALWAYS | {"dst", "subject", "value"},
    EventKind.LIMIT: _ALWAYS | {"reason", "subject", "value"},
    EventKind.QUERY: _ALWAYS | {"reason", "subject", "value"},
}
OPTIONAL: dict[str, frozenset[str]] = {
    EventKind.SUBMIT: frozenset({"batch_id"}),
    EventKind.MOVE: frozenset({"batch_id", "trace_id", "worker"}),
    EventKind.BREAKER: frozenset(),
    EventKind.WAIT: frozenset({"batch_id", "trace_id", "worker"}),
    EventKind.CALL: frozenset({"batch_id", "trace_id", "worker"}),
    EventKind.ALERT: frozenset(),
    EventKind.LIMIT: frozenset(),
    EventKind.QUERY: frozenset({"task_id", "batch_id", "trace_id", "attempt"}),
}


def schema_problems(event: Event) -> list[str]:
    """What is wrong with `event` against the schema (empty when it conforms)."""
    required = REQUIRED.get(event.kind)
    if required is None:
        return [f"unknown event kind {event.kind!r}"]
    allowed = required | OPTIONAL[event.kind]
    problems = [f"{event.kind}: {name} is missing" for name in Event._fields
                if name in required and getattr(event, name) is None]
    problems += [f"{event.kind}: {name} should be None, got {getattr(event, name)!r}"
                 for name in Event._fields
                 if name not in allowed and getattr(event, name) is not None]
    if event.attempt is not None and not (isinstance(event.attempt, int) and event.attempt >= 1):
        problems.append(f"{event.kind}: attempt should be an integer >= 1, got {event.attempt!r}")
    seconds = event.kind in (EventKind.WAIT, EventKind.CALL, EventKind.QUERY)
    if seconds and event.value is not None and not event.value >= 0:
        problems.append(f"{event.kind}: value should be seconds >= 0, got {event.value!r}")
    return problems


class EventList:
    """A sink that keeps every event in memory: for tests and small runs."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def for_task(self, task_id: str) -> list[Event]:
        """A task's whole history, in order."""
        return [e for e in self.events if e.task_id == task_id]


class Emitter:
    """Fans events out to any number of sinks; cheap when there are none."""

    __slots__ = ("sinks",)

    def __init__(self, sinks: list[EventSink] | None = None) -> None:
        self.sinks: list[EventSink] = list(sinks or [])

    def add(self, sink: EventSink) -> None:
        self.sinks.append(sink)

    def __call__(self, event: Event) -> None:
        for sink in self.sinks:
            sink(event)


class SerialEmitter(Emitter):
    """An Emitter for threaded drivers: one event at a time through the sinks, under a lock
    the driver injects (the core starts no threads and owns no locks). Sinks such as the
    metrics aggregator or a trace writer then never see two events at once."""

    __slots__ = ("lock",)

    def __init__(self, sinks: list[EventSink], lock: AbstractContextManager[Any]) -> None:
        super().__init__(sinks)
        self.lock = lock

    def __call__(self, event: Event) -> None:
        with self.lock:
            for sink in self.sinks:
                sink(event)
