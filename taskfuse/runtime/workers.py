"""The thread executor: N worker threads take claimed attempts from the buffer and run them.

Each thread takes the next buffered attempt (`Attempts.buffer`), runs the kind's function in
the thread, or in a task process for kinds with executor="process" (`ProcessPool`, killed on
a stop), and hands the outcome to the completer (`Attempts.committing`). Stopping is
cooperative: an attempt told to stop before a thread took it ends without running; one
that ignores its stop keeps its thread, which the watchdog then counts as stuck and may
replace. A stuck thread that returns to a pool that is full without it retires
(`taskfuse.core.capacity.retires_on_return`, the lab's rule too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from taskfuse.core.capacity import retires_on_return
from taskfuse.core.retry import ErrorKind
from taskfuse.core.task import Outcome
from taskfuse.runtime.app import App
from taskfuse.runtime.attempts import AttemptKey, key_of
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.errors import attempt_failure
from taskfuse.runtime.logs import TaskOutput
from taskfuse.runtime.procexec import ProcessPool
from taskfuse.runtime.shared import Shared, task_extra

log = logging.getLogger("taskfuse.runtime")

#: How often `wait_settled` looks whether every worker thread waits for work.
SETTLE_POLL_S = 0.005


def spawn(target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
    """A started daemon thread: a task that never returns must not keep the process alive."""
    thread = threading.Thread(target=target, name=name, args=args, daemon=True)
    thread.start()
    return thread


class ThreadWorkers:
    """The worker threads of one runner (module doc)."""

    def __init__(self, shared: Shared, app: App, procs: ProcessPool, workers: int) -> None:
        self.shared = shared
        self._app = app
        self.procs = procs
        self.workers = workers
        self.threads: list[threading.Thread] = []
        #: The thread running each attempt, by name (the watchdog names stuck ones).
        self.thread_of: dict[AttemptKey, str] = {}

    def add(self) -> None:
        """One more worker thread that counts as capacity (attempts.mu held)."""
        self.shared.attempts.live_threads += 1
        self.threads.append(spawn(self._work, f"taskfuse-worker-{len(self.threads)}"))

    def wait_settled(self, timeout: float) -> bool:
        """Wait until every worker thread is up and waiting for work; False if that took
        longer than `timeout` (see `Runner.wait_settled`)."""
        deadline = time.monotonic() + timeout
        at = self.shared.attempts
        while True:
            with at.mu:
                if at.waiting >= at.live_threads:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(SETTLE_POLL_S)

    def join(self, until: float) -> None:
        """Wait for the worker threads to end, until the monotonic time `until`."""
        for thread in self.threads:
            thread.join(max(0.0, until - time.monotonic()))

    def _work(self) -> None:
        """Take an attempt, run it, hand the outcome to the completer; retire when told."""
        sh = self.shared
        at = sh.attempts
        name = threading.current_thread().name
        while True:
            with at.mu:
                while not at.buffer:
                    if sh.stopping or at.live_threads > self.workers:
                        at.live_threads -= 1
                        return
                    at.waiting += 1
                    at.work.wait()
                    at.waiting -= 1
                ctx = at.buffer.popleft()
                key = key_of(ctx.task)
                at.running[key] = ctx
                self.thread_of[key] = name
            sh.claim_wake.set()  # a slot in the buffer is free
            sh.began(ctx.task)
            began = time.monotonic()
            outcome = self._execute(ctx)
            with at.mu:
                at.observe(time.monotonic() - began)
                at.running.pop(key, None)
                at.stopped.pop(key, None)
                self.thread_of.pop(key, None)
                if at.stuck.pop(key, None) is not None:
                    at.live_threads += 1  # back in service (it may retire just below)
                    log.info("worker thread %s is free again: task %s returned", name,
                             ctx.task.task_id, extra=task_extra(ctx.task))
                at.committing[key] = (ctx, outcome)
                at.outcomes.notify()
                retire = retires_on_return(at.live_threads, self.workers)
                if retire:
                    at.live_threads -= 1
                    sh.stats.retired += 1
            if ctx.task.downstreams:  # its bulkhead has room again: no need to await the commit
                sh.claim_wake.set()
            if retire:  # a replacement took this thread's place while it was stuck
                return

    def _execute(self, ctx: TaskContext) -> Outcome:
        """Run the user's function, outside every lock; any exception becomes a failure,
        a BaseException too (sys.exit() in a task must not end the thread: `TASK_EXITS`)."""
        task = ctx.task
        if ctx.stopped:  # canceled, timed out or released while it waited in the buffer
            return Outcome.failure(ErrorKind.CANCELED, "stopped before it started")
        try:
            definition = self._app.definition(task.kind)
            if definition.executor == "process":
                return self.procs.run(ctx, definition)
            with TaskOutput(ctx):
                return Outcome.success(definition.fn(ctx, task.payload))
        except BaseException as exc:
            return attempt_failure(ctx.logger, exc)
