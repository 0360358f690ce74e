"""The `process` executor: a task kind that may hang runs in a process that can be killed.

Threads cannot be killed, so a task that ignores its context (a read without a timeout, a C
call that never returns) keeps its worker thread to the end, whatever its timeout says. A
kind registered with ``executor="process"`` runs in a task process instead; the worker thread
that claimed the task drives that process and kills it when the attempt must stop (timeout,
cancel, lost lease, shutdown), so the thread is free again at the timeout.

Theory of operation
-------------------
* `ProcessPool` (one per Runner) holds at most one task process per worker thread; a process
  serves attempt after attempt, so start-up is paid once per process, not per task. The
  start method is forkserver: this process has threads, which must not be forked, and a
  child forked from the fork server (which preloaded taskfuse) is ready in ~12 ms where
  spawn takes ~210 ms.
* Warm before the first claim: a task's timeout runs from its claim, so a module that takes
  longer to import than the timeout would time out every first attempt. The Runner names
  the process kinds' functions (`preload`); the fork server imports their modules once
  (every process forked from it starts with them), each task process imports the functions
  again (a no-op then) and says it is ready, and `warm()` starts every process and waits for
  that before the Runner claims anything. A function no process can import stops the worker
  at its start, in one line, with nothing claimed. A process started later (a replacement
  after a kill) is forked from the same fork server, so it too starts with the modules.
* The claiming thread sends the job (the function as ``module:qualname``, who the attempt
  is, the payload in the kind's serialization), then waits on three things at once: the
  pipe, the process's exit, and a wake-up pipe that the attempt's stop signal writes to. It
  answers the process's calls with the attempt's real TaskContext, so `ctx.downstream()`
  passes this runner's breaker, bulkhead, token bucket and fleet permits exactly as a
  thread task's call does (and `.call(fn)` gets the client's budget and retry decisions
  from this runner's call client, shared with thread tasks), and it emits the process's
  log records.
* Told to stop, the thread sends a stop flag, then SIGTERM, then SIGKILL after
  `kill_grace_s`; it reaps the process, closes the downstream calls it left open, starts a
  replacement and returns. Whatever the attempt would have returned is void anyway (the
  version check).
* `close()` (the Runner's shutdown, after running tasks were released) kills every task
  process. A task process also exits when its pipe ends, so a worker killed by SIGKILL
  leaves none behind either.
* A task process leads its own process group, and every signal goes to the group, with a
  last SIGKILL to the group once the process is reaped: a child the task forked (a
  subprocess, a multiprocessing helper) dies with the task instead of living on under init.

The task process's side is `taskfuse.runtime.procworker`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from taskfuse.core.retry import ErrorKind
from taskfuse.core.task import Outcome
from taskfuse.runtime import calls, procworker
from taskfuse.runtime.errors import (
    PAYLOAD_UNSERIALIZABLE,
    PROCESS_DIED,
    RESULT_UNSERIALIZABLE,
    RuntimeConfigError,
    TaskError,
    outcome_of,
)
from taskfuse.runtime.logs import PrintedLines

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from taskfuse.runtime.app import TaskDef
    from taskfuse.runtime.context import DownstreamCall, TaskContext

#: Where a kind's function runs: a worker thread (the default) or a task process.
EXECUTORS = ("thread", "process", "async")
#: Seconds between SIGTERM (the task's `finally` blocks run) and SIGKILL.
KILL_GRACE_S = 0.5
START_METHOD = "forkserver"
#: How long `warm()` waits for task processes to import the task functions.
WARM_TIMEOUT_S = 120.0
#: Exceptions that unpickle anywhere taskfuse is installed; others cross as their outcome.
_PORTABLE_MODULES = ("builtins", "taskfuse.")

log = logging.getLogger("taskfuse.runtime.procexec")


def preload_modules(refs: Sequence[str]) -> list[str]:
    """The modules of `refs` for the fork server to import once: each was imported here
    already (its function exists), so importing it there succeeds as it did here. Not
    ``__main__``: Python 3.11's fork server does not preload a script's main module."""
    return sorted({ref.partition(":")[0] for ref in refs} - {"__main__"})


def fn_reference(kind: str, fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a task function, which a task process imports to find it.

    Raises RuntimeConfigError (one line) for a function no other process can find that way.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str) or not module:
        why = f"a {type(fn).__name__} object has no module and qualified name"
    elif "<lambda>" in qualname:
        why = f"{qualname!r} is a lambda"
    elif "<locals>" in qualname:
        why = f"{qualname!r} is defined inside a function"
    else:
        return f"{module}:{qualname}"
    raise RuntimeConfigError(
        f"kind {kind!r}: executor='process' finds the function by module:qualname in "
        f"another process, but {why}; define it at the top level of a module")


class ProcessPool:
    """Task processes of one Runner: at most one per worker thread (see module doc)."""

    def __init__(self, size: int, *, kill_grace_s: float = KILL_GRACE_S,
                 method: str = START_METHOD, preload: Sequence[str] = ()) -> None:
        self.size = size
        self.kill_grace_s = kill_grace_s
        #: The process kinds' functions (``module:qualname``), imported before a first job.
        self.preload = tuple(preload)
        self._mp = multiprocessing.get_context(method)
        if method == "forkserver":  # takes effect when the fork server starts (once)
            self._mp.set_forkserver_preload([procworker.__name__, *preload_modules(preload)])
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()  # one start at a time; close() waits for it
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._closed = False
        self.started = 0  # task processes started, ever
        self.killed = 0  # task processes killed or found dead after an attempt

    def __repr__(self) -> str:
        return f"ProcessPool(size={self.size}, alive={len(self.pids())}, killed={self.killed})"

    def pids(self) -> list[int]:
        """Process ids of the live task processes, idle and busy."""
        with self._lock:
            children = [*self._idle, *self._busy]
        return [c.pid for c in children]

    def warm(self, timeout_s: float = WARM_TIMEOUT_S) -> None:
        """Start every task process now and wait until each has imported `preload`.

        Raises RuntimeConfigError (one line) when a function cannot be imported there, or
        when the processes are not ready within `timeout_s` (an import that hangs); the
        processes started are then stopped again.
        """
        with self._lock:
            missing = self.size - len(self._idle) - len(self._busy)
        deadline = time.monotonic() + timeout_s
        try:
            children = [c for c in (self._start(busy=False) for _ in range(missing)) if c]
            for child in children:
                failures = child.wait_ready(deadline)
                if failures:
                    ref, error = failures[0]
                    raise RuntimeConfigError(
                        f"task function {ref}: a task process cannot import it: {error}")
        except RuntimeConfigError:
            self.close()
            raise
        except Exception as exc:  # the fork server died importing a module (not ImportError)
            self.close()
            raise RuntimeConfigError(
                f"task processes cannot start ({exc!r}); their fork server imports "
                f"{', '.join(preload_modules(self.preload))}") from exc

    # -- one attempt -----------------------------------------------------------------------

    def run(self, ctx: TaskContext, definition: TaskDef) -> Outcome:
        """Run one attempt in a task process; returns its outcome (never raises for the task).

        Called by the worker thread that claimed the task, outside the runner's lock.
        """
        task = ctx.task
        try:
            payload = procworker.encode(definition.serializer, task.payload)
        except Exception as exc:
            return _refused(ctx, PAYLOAD_UNSERIALIZABLE,
                            f"the payload ({type(task.payload).__name__}) cannot cross to a "
                            f"task process as {definition.serializer}: {exc}")
        job = procworker.Job(
            fn_reference(task.kind, definition.fn), definition.serializer, payload,
            procworker.Attempt(task.task_id, task.trace_id, task.kind, task.attempt,
                               task.batch_id, ctx.deadline, task.worker_id),
            (logging.getLogger().getEffectiveLevel(),
             logging.getLogger("taskfuse").getEffectiveLevel()),
            isinstance(sys.stdout, PrintedLines),
        )
        if ctx.stopped:  # canceled between the claim and now: no process to spend
            return Outcome.failure(ErrorKind.CANCELED, "stopped before it started")
        child = self._checkout()
        if child is None:
            return Outcome.failure(ErrorKind.CANCELED, "the worker is shutting down")
        attempt = _Attempt(ctx, child, definition.serializer)
        try:
            outcome = attempt.drive(job)
        except BaseException:
            attempt.close_calls(ErrorKind.CANCELED)
            self._retire(child)
            raise
        if outcome is not None:
            attempt.close_calls(ErrorKind.CANCELED)  # a call the task entered by hand
            self._checkin(child)
            return outcome
        return self._ended_early(attempt)

    def _ended_early(self, attempt: _Attempt) -> Outcome:
        """The attempt was told to stop, or its process died: kill, reap, replace."""
        ctx, child = attempt.ctx, attempt.child
        stopped = ctx.stopped
        if stopped:
            child.send_quietly(("stop",))
        attempt.close_calls(ErrorKind.CANCELED if stopped else PROCESS_DIED)
        code = self._retire(child)
        if stopped:
            ctx.logger.info("stopped: task process %d killed (exit code %s)", child.pid, code)
            return Outcome.failure(ErrorKind.CANCELED, "stopped; its task process was killed")
        message = f"task process {child.pid} exited with code {code} before it answered"
        ctx.logger.warning("attempt failed: %s", message)
        return Outcome.failure(PROCESS_DIED, message)

    # -- the processes ---------------------------------------------------------------------

    def _checkout(self) -> _Child | None:
        """An idle live task process, else a new one; None once closed."""
        dead = []
        with self._lock:
            if self._closed:
                return None
            child = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.alive():
                    child = candidate
                    self._busy.add(child)
                    break
                dead.append(candidate)
                self.killed += 1
        for gone in dead:
            gone.stop(0.0)
            gone.close()
        return child if child is not None else self._start(busy=True)

    def _checkin(self, child: _Child) -> None:
        with self._lock:
            self._busy.discard(child)
            keep = not self._closed and len(self._idle) + len(self._busy) < self.size
            if keep:
                self._idle.append(child)
        if not keep:
            child.stop(self.kill_grace_s)
            child.close()

    def _retire(self, child: _Child) -> int | None:
        """Kill and reap a task process, and start its replacement; returns its exit code."""
        code = child.stop(self.kill_grace_s)
        child.close()
        with self._lock:
            self._busy.discard(child)
            self.killed += 1
            replace = not self._closed and len(self._idle) + len(self._busy) < self.size
        if replace:  # now, so the next task does not wait for a start
            try:
                self._start(busy=False)
            except Exception:  # the next checkout tries again; this attempt's end stands
                log.exception("could not start a replacement task process")
        return code

    def _start(self, busy: bool) -> _Child | None:
        with self._start_lock:
            with self._lock:
                if self._closed:
                    return None
            child = _Child(self._mp, self.preload)
            with self._lock:
                self.started += 1
                if busy:
                    self._busy.add(child)
                else:
                    self._idle.append(child)
        return child

    def close(self) -> None:
        """Kill every task process, idle or busy, and start no more; safe to call twice.

        A busy process's thread notices its death and returns (its task was released or
        timed out before the Runner closes the pool).
        """
        with self._lock:
            self._closed = True
        with self._start_lock:  # a process being started now is registered before we go on
            pass
        with self._lock:
            idle, self._idle = self._idle, []
            children = [*idle, *self._busy]
        for child in children:
            child.terminate()
        deadline = time.monotonic() + self.kill_grace_s
        for child in children:
            child.stop(max(0.0, deadline - time.monotonic()))
        for child in idle:
            child.close()


class _Child:
    """One task process and the worker's end of its pipe.

    `terminate` and `stop` may be called from two threads (the driving thread, and `close`
    at shutdown); only the thread that owns the child (driver, or the pool when idle)
    closes its pipe, so no thread ever reads a pipe another closed under it.
    """

    __slots__ = ("_code", "_lock", "_stopped", "conn", "pid", "process")

    def __init__(self, mp: BaseContext, preload: tuple[str, ...] = ()) -> None:
        ours, theirs = mp.Pipe(duplex=True)
        self.process = mp.Process(target=procworker.serve, args=(theirs, preload),
                                  name="taskfuse-task", daemon=True)
        self.process.start()
        theirs.close()
        self.conn = ours
        self.pid: int = self.process.pid or 0
        self._lock = threading.Lock()
        self._stopped = False
        self._code: int | None = None

    def wait_ready(self, deadline: float) -> list[tuple[str, str]]:
        """Wait (until `deadline`, monotonic) for its imports; the functions that failed.
        Log records it sends meanwhile (an import that logs) are emitted here."""
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0 or not self.conn.poll(left):
                    raise RuntimeConfigError(
                        f"task process {self.pid} was not ready (importing the task "
                        f"functions) within the time allowed")
                message = self.conn.recv()
            except (EOFError, OSError):
                raise RuntimeConfigError(
                    f"task process {self.pid} exited with code {self.process.exitcode} "
                    f"while importing the task functions") from None
            if message[0] == "ready":
                return list(message[1])
            if message[0] == "log":
                emit_record(message[1], None)

    def alive(self) -> bool:
        return not self._stopped and self.process.is_alive()

    def send_quietly(self, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # it is gone already
            self.conn.send(message)

    def terminate(self) -> None:
        """SIGTERM, unless it already ended (does not wait)."""
        with self._lock:
            if not self._stopped and self.process.exitcode is None:
                self._signal(signal.SIGTERM)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM, SIGKILL after `grace_s`, and reap; returns the exit code (idempotent)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                process = self.process
                if process.exitcode is None:
                    self._signal(signal.SIGTERM)
                    process.join(grace_s)
                if process.exitcode is None:
                    self._signal(signal.SIGKILL)
                    process.join(5.0)
                self._code = process.exitcode
                self._signal(signal.SIGKILL, group_only=True)  # what the task left running
                if self._code is None:
                    log.error("task process %d survived SIGKILL for 5 s", self.pid)
            return self._code

    def _signal(self, signum: int, group_only: bool = False) -> None:
        """Signal the process's group; just the process while it has not made its group
        yet (right after its start), and nothing once neither exists. `group_only` once
        the process is reaped: its pid is no longer ours to signal."""
        with contextlib.suppress(ProcessLookupError):
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                if not group_only:
                    os.kill(self.pid, signum)

    def close(self) -> None:
        """Close the pipe and, once stopped, the process's own handles (its owner only)."""
        self.conn.close()
        if self._stopped and self._code is not None:
            self.process.close()


class _Attempt:
    """One attempt as its driving thread sees it: serve the process until it answers."""

    __slots__ = ("calls", "child", "ctx", "serializer")

    def __init__(self, ctx: TaskContext, child: _Child, serializer: str) -> None:
        self.ctx = ctx
        self.child = child
        self.serializer = serializer
        self.calls: dict[int, DownstreamCall] = {}  # entered and not exited, by call id

    def drive(self, job: procworker.Job) -> Outcome | None:
        """The attempt's outcome, or None when it was told to stop or its process died."""
        ctx, conn = self.ctx, self.child.conn
        wake = _Wake()
        ctx.set_stop_event(wake)
        try:
            conn.send(("run", job))
            waitables = [conn, self.child.process.sentinel, wake]
            while not ctx.stopped:
                ready = wait(waitables)
                if conn in ready:
                    message = conn.recv()
                    if message[0] == "done":
                        return self._outcome(message)
                    self._serve(message)
                elif self.child.process.sentinel in ready:
                    return None  # it died, and said nothing more
            return None
        except (EOFError, OSError):
            return None  # the pipe ended: the process died
        finally:
            wake.close()

    def _outcome(self, message: tuple[Any, ...]) -> Outcome:
        _, ok, data, error_msg = message
        if not ok:
            return Outcome.failure(data, error_msg)
        try:
            return Outcome.success(procworker.decode(self.serializer, data))
        except Exception as exc:
            return _refused(self.ctx, RESULT_UNSERIALIZABLE,
                            f"the result cannot be read as {self.serializer} in the worker: "
                            f"{exc}")

    def _serve(self, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag == "log":
            emit_record(message[1], self.ctx)
        elif tag == "call":
            self._answer(message[1], message[2:])
        elif tag == "exit":
            _, call_id, error_kind, latency = message
            call = self.calls.pop(call_id, None)
            if call is not None:
                call.finish(error_kind, latency)
        elif tag == "ready":  # a process started after warm(): a failed import is the
            pass  # job's own outcome (it tries again and says why)
        else:
            raise ValueError(f"unknown message {tag!r} from task process {self.child.pid}")

    def _answer(self, op: str, args: tuple[Any, ...]) -> None:
        """Run a call of the task process with the real context, and send what it gave."""
        ctx = self.ctx
        try:
            if op == "enter":
                call_id, name = args
                call = ctx.downstream(name)
                call.__enter__()
                self.calls[call_id] = call
                value: Any = None
            elif op == "call_begin":
                (name,) = args
                ctx.downstream(name)  # an unknown name is refused here, as on a thread
                value = calls.begin(ctx.host, calls.client_of(ctx.host, name))
            elif op == "call_settle":
                name, retry, kind, previous = args
                value = calls.settle(ctx.host, calls.client_of(ctx.host, name), retry,
                                     kind, previous)
            elif op == "heartbeat":
                value = ctx.heartbeat()
            elif op == "cancelled":
                value = ctx.cancelled()
            else:
                raise ValueError(f"unknown call {op!r} from task process {self.child.pid}")
        except Exception as exc:
            self.child.conn.send(("reply", False, portable(exc)))
        else:
            self.child.conn.send(("reply", True, value))

    def close_calls(self, error_kind: str) -> None:
        """Record the calls the process left open as failed, releasing what they hold."""
        calls, self.calls = self.calls, {}
        for call in calls.values():
            try:
                call.finish(error_kind)
            except Exception:
                self.ctx.logger.exception("could not close a downstream call of a task process")


class _Wake(threading.Event):
    """A stop Event that also makes a pipe readable, so that the driving thread can wait for
    it together with the task process's pipe and exit (`multiprocessing.connection.wait`)."""

    def __init__(self) -> None:
        super().__init__()
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._fd_lock = threading.Lock()

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        super().set()
        with self._fd_lock:  # a late stop signal may come after the attempt closed us
            if self._w >= 0:
                with contextlib.suppress(BlockingIOError):  # readable already
                    os.write(self._w, b"!")

    def close(self) -> None:
        with self._fd_lock:
            os.close(self._r)
            os.close(self._w)
            self._r = self._w = -1


def emit_record(fields: dict[str, Any], ctx: TaskContext | None) -> None:
    """Emit a task process's log record here, as if logged here: same logger, same level
    filter, stamped with the task's trace_id and task_id when the logger did not (no task
    while a process imports its functions)."""
    if ctx is not None:
        fields.setdefault("trace_id", ctx.trace_id)
        fields.setdefault("task_id", ctx.task_id)
    record = logging.makeLogRecord(fields)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def portable(exc: Exception) -> Exception:
    """An error to raise in a task process: ours and builtins as they are, others as a
    TaskError with the same outcome (a driver's class may not unpickle there)."""
    if type(exc).__module__.startswith(_PORTABLE_MODULES):
        return exc
    outcome = outcome_of(exc)
    return TaskError(outcome.error_kind or type(exc).__name__, outcome.error_msg or "")


def _refused(ctx: TaskContext, kind: str, message: str) -> Outcome:
    """A payload or result that cannot cross: one log line, and a fatal outcome."""
    ctx.logger.warning("%s: %s", kind, message)
    return Outcome.failure(kind, message)
