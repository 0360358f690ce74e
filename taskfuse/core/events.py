"""One event schema for every move, breaker change, wait, call and alert.

Events are NamedTuples: immutable and named, yet cheap to build on the hot path (a frozen
dataclass costs about three times as much). Sinks that want richer records convert at the
edge (the trace writer, the Prometheus exporter, the log formatter).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import NamedTuple


class EventKind(StrEnum):
    SUBMIT = "submit"  # a task was created (dst PENDING); a dedupe hit emits nothing
    MOVE = "move"  # a status move through the table (src -> dst, reason)
    BREAKER = "breaker"  # a circuit breaker changed state (subject = downstream)
    WAIT = "wait"  # something waited: a token bucket, a bulkhead, a pool (value = seconds)
    CALL = "call"  # a downstream call ended (subject = downstream, reason = outcome kind)
    ALERT = "alert"  # an alert rule fired (dst "firing") or resolved (dst "resolved")
    LIMIT = "limit"  # an adaptive limit changed (subject = downstream, value = new limit)


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
