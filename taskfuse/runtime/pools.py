"""Pool sections: `ctx.pool("batch")`, the connection-limited part of a task.

The source's fix gives the batch a DB pool of its own, so it never queues in front of the
business API for a connection. A `PoolSection` is that limit as the runtime holds it: at
most `size` holders at once (`pools.NAME.size` of the limits), the others wait in FIFO order
(the core's Bulkhead hands a freed permit straight to the oldest waiter), and a wait longer
than `acquire_timeout_s` fails the step with the error kind `pool_timeout`, as the
simulated pool does. Task code holds a permit while it uses a connection::

    with ctx.pool("batch"):
        with engine.connect() as conn:      # your pool, sized from the same file:
            ...                             # create_engine(url, pool_size=app.pool_size("batch"))

Code outside tasks (a web handler sharing the pool) takes the same FIFO turn with
`runner.pools[name].permit()`. A task waiting for its turn is woken by a stop (cancel,
timeout, shutdown) and unwinds with TaskCanceled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.events import Event, EventKind
from taskfuse.runtime.errors import RuntimeConfigError, TaskCanceled, TaskError

if TYPE_CHECKING:
    from taskfuse.runtime.context import TaskContext

#: The error kind of a step that waited longer than the pool's acquire_timeout_s.
POOL_TIMEOUT = "pool_timeout"


class Ticket:
    """A place in a section's queue; its Event is made only when it really has to wait.

    `event` and `granted` are what the runner's stop signal and grant look at, so a task's
    ticket can be registered with the runner like a bulkhead permit.
    """

    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event: Any = None  # a threading.Event, or a loop signal (runtime.aio)
        self.granted = False


class PoolSection:
    """At most `size` holders, FIFO, waits bounded by `acquire_timeout_s` (module doc)."""

    def __init__(self, name: str, size: int, acquire_timeout_s: float) -> None:
        self.name = name
        self.size = size
        self.acquire_timeout_s = acquire_timeout_s
        self._gate: Bulkhead[Ticket] = Bulkhead(size, name)
        self._lock = threading.Lock()
        self._closed = False
        self._waiters: set[Ticket] = set()  # queued tickets, woken all at once by close()
        #: Waits that ended without a permit (timeouts), and permits granted: counters.
        self.timeouts = 0
        self.granted = 0

    def __repr__(self) -> str:
        return (f"PoolSection({self.name!r}, size={self.size}, in_use={self.in_use}, "
                f"waiting={self.waiting})")

    @property
    def in_use(self) -> int:
        return self._gate.in_use

    @property
    def waiting(self) -> int:
        return self._gate.waiting

    @property
    def max_in_use(self) -> int:
        return self._gate.max_in_use

    @property
    def closed(self) -> bool:
        return self._closed

    def enter(self, ticket: Ticket, signal: Callable[[], Any] = threading.Event) -> bool:
        """A permit now (True), or the ticket queued with a signal to wait on (False): a
        threading.Event, or for a coroutine an object whose `set()` resolves its future."""
        with self._lock:
            if not self._closed and self._gate.try_acquire(ticket):
                self.granted += 1
                ticket.granted = True
                return True
            ticket.event = signal()
            if self._closed:
                ticket.event.set()  # a closed section answers at once: no permit
                return False
            self._waiters.add(ticket)
            return False

    def wait(self, ticket: Ticket, timeout: float | None = None) -> bool:
        """Wait for a queued ticket's turn (up to `timeout`, default acquire_timeout_s).

        True: the permit is held. False: no permit (timed out, woken by a stop, or the
        section closed); the ticket has left the queue.
        """
        assert ticket.event is not None
        ticket.event.wait(self.acquire_timeout_s if timeout is None else timeout)
        return self.settle(ticket)

    def settle(self, ticket: Ticket) -> bool:
        """After a queued ticket's wait ended (granted, timed out or woken): True when the
        permit is held; else the ticket leaves the queue."""
        with self._lock:
            self._waiters.discard(ticket)
            if ticket.granted:
                return True
            self._gate.cancel(ticket)
            return False

    def acquire(self, ticket: Ticket | None = None, timeout: float | None = None) -> bool:
        """enter, then wait if queued: True when the permit is held."""
        ticket = ticket or Ticket()
        if self.enter(ticket):
            return True
        if self.wait(ticket, timeout):
            return True
        self.timed_out()
        return False

    def timed_out(self) -> None:
        """Count a wait that ended without a permit (not when the section was closed)."""
        with self._lock:
            if not self._closed:
                self.timeouts += 1

    def release(self) -> None:
        """Give a permit back; the oldest waiter, if any, gets it."""
        with self._lock:
            nxt = self._gate.release()
            if nxt is not None:
                self.granted += 1
                nxt.granted = True
                assert nxt.event is not None
                nxt.event.set()

    def close(self) -> None:
        """Stop handing out permits: waiters and later callers get none (at once)."""
        with self._lock:
            self._closed = True
            for ticket in self._waiters:
                if ticket.event is not None:
                    ticket.event.set()

    def permit(self) -> SectionPermit:
        """A permit for code outside a task (a context manager, or acquire/release)."""
        return SectionPermit(self)


class SectionPermit:
    """One permit of a section for code outside a task; a timeout is a TaskError."""

    def __init__(self, section: PoolSection) -> None:
        self.section = section

    def acquire(self) -> None:
        if not self.section.acquire():
            raise TaskError(POOL_TIMEOUT, _no_permit(self.section))

    def release(self) -> None:
        self.section.release()

    def __enter__(self) -> SectionPermit:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class PoolPermit:
    """`ctx.pool(name)`: one permit of the runner's section `name`, held by a task.

    A wait is registered with the runner like a bulkhead wait, so a stop wakes it; the wait
    is a WAIT event (reason `pool`, or `pool_timeout`) in the task's history, as in the lab.
    """

    __slots__ = ("_ctx", "_held", "section")

    def __init__(self, ctx: TaskContext, name: str) -> None:
        sections = ctx.host.pools
        section = sections.get(name)
        if section is None:
            raise RuntimeConfigError(f"pool {name!r} is not configured (configured: "
                                     f"{', '.join(sorted(sections)) or 'none'})")
        self._ctx = ctx
        self.section = section
        self._held = False

    def acquire(self) -> PoolPermit:
        """Take the permit (waiting in line if need be); raises TaskError(pool_timeout)."""
        if self._held:
            raise RuntimeError(f"this permit of pool {self.section.name!r} is already held")
        ctx, runner, section = self._ctx, self._ctx.host, self.section
        ticket = Ticket()
        if not section.enter(ticket):
            began = time.monotonic()
            with runner.lock:
                runner.permit_waiting(ctx.task, ticket)
            if ctx.stopped:
                assert ticket.event is not None
                ticket.event.set()
            self._after_wait(section.wait(ticket), began)
        self._held = True
        return self

    def _after_wait(self, ok: bool, began: float) -> None:
        """After a queued wait ended (`ok`: the permit is held): record the wait; a stop or
        a timeout gives the permit back and raises TaskCanceled / TaskError(pool_timeout)."""
        ctx, runner, section = self._ctx, self._ctx.host, self.section
        waited = time.monotonic() - began
        with runner.lock:
            runner.permit_done(ctx.task)
            task = ctx.task
            runner.emit(Event(runner.clock(), EventKind.WAIT, task.task_id, task.batch_id,
                              task.trace_id, None, None, "pool" if ok else POOL_TIMEOUT,
                              task.attempt, task.worker_id, section.name, waited))
        if ok and ctx.stopped:
            section.release()
            ok = False
        if not ok:
            if ctx.stopped:
                raise TaskCanceled(f"stopped while waiting for pool {section.name!r}")
            section.timed_out()
            raise TaskError(POOL_TIMEOUT, _no_permit(section))

    def release(self) -> None:
        """Give the permit back (once)."""
        if self._held:
            self._held = False
            self.section.release()

    def __enter__(self) -> PoolPermit:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _no_permit(section: PoolSection) -> str:
    return (f"no connection of pool {section.name!r} within {section.acquire_timeout_s:g}s "
            f"({section.size} in use)")
