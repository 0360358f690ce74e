"""The task process of the `process` executor: it runs one attempt at a time for the worker
thread that drives it (`taskfuse.runtime.procexec`), and never outlives that worker.

Theory of operation
-------------------
A task process is started once and serves attempts until it is killed or its worker goes
away. It has two threads:

* the main thread waits for a job, runs the task function with a `ProcessContext`, and
  sends back how it ended: the result in the kind's serialization, or the error kind and
  message `outcome_of` gives for what it raised (the outcome a thread would have produced);
* a reader thread owns the receiving end of the pipe: a job goes to the main thread, a reply
  to the call waiting for it, a stop message sets the attempt's stop flag. The end of the
  pipe (the worker closed it, or died, even by SIGKILL) ends the process at once.

What the context cannot answer alone crosses the pipe to the driving thread, which answers
from the attempt's real TaskContext: admission to a downstream and the record of the call
(the fuses live in the worker, shared with thread tasks), the call client's budget and
retry decisions behind `ctx.downstream(name).call(fn)` (whose `fn` runs here, in the same
loop as on a thread), heartbeats, the store's view behind `cancelled()`. Every log record
is forwarded and emitted by the worker's logging.

Signals: SIGINT is ignored (the worker's graceful shutdown decides about running tasks);
SIGTERM raises SystemExit, so `finally` blocks run before the worker's SIGKILL follows.
A task process leads a process group of its own, and the worker signals the whole group:
a child the task forked dies with it, and when the worker dies (the pipe ends) the process
kills its group on the way out. A BaseException the task raises itself (sys.exit() in
argparse code, KeyboardInterrupt) is the attempt's failure, logged like any other, and the
process goes on serving; only SIGTERM's SystemExit ends it.

Messages are tuples whose first item names them:

    worker -> task process:  ("run", Job)  ("reply", ok, value)  ("stop",)
    task process -> worker:  ("ready", [(function, error), ...]) once, first
                             ("log", fields)  ("call", op, *args)
                             ("exit", call_id, error_kind | None, latency)
                             ("done", True, result_data, None)  ("done", False, kind, message)
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from types import FrameType, TracebackType
from typing import Any, NamedTuple

from taskfuse.observe import traceparent as w3c
from taskfuse.runtime.calls import attempt_through, run_call
from taskfuse.runtime.context import TaskLogger, call_error_kind, task_logger
from taskfuse.runtime.errors import (
    BAD_CONFIG,
    PAYLOAD_UNSERIALIZABLE,
    RESULT_UNSERIALIZABLE,
    TaskCanceled,
    attempt_failure,
)
from taskfuse.runtime.logs import PrintedLines, TaskOutput, route_python_output

#: How payloads and results cross: JSON (portable, the store keeps JSON anyway) or pickle.
SERIALIZERS = ("json", "pickle")
#: What `Link.call` answers once the attempt was told to stop: the worker no longer listens.
STOPPED: Any = object()
_PLAIN = (str, int, float, bool, type(None))
_FORMATTER = logging.Formatter()


def encode(serializer: str, value: Any) -> str | bytes:
    """A payload or result as it crosses the pipe; raises when it cannot."""
    if serializer == "json":
        return json.dumps(value)
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decode(serializer: str, data: str | bytes) -> Any:
    if serializer == "json":
        return json.loads(data)
    return pickle.loads(data)


class Attempt(NamedTuple):
    """Who the attempt is, as its task process knows it (the record stays in the worker)."""

    task_id: str
    trace_id: str
    kind: str
    attempt: int
    batch_id: str | None
    deadline: float
    worker_id: str | None


class Job(NamedTuple):
    """One attempt to run: the function by reference, who it is, its serialized payload."""

    fn: str  # "module:qualname"
    serializer: str
    payload: str | bytes
    attempt: Attempt
    levels: tuple[int, int]  # effective levels of the worker's root and "taskfuse" loggers
    prints: bool = False  # the worker's stdout is captured: so is what the task prints


# -- the pipe ------------------------------------------------------------------------------


class Link:
    """The task process's end of the pipe: sends from any thread, receives on one thread."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.call_ids = itertools.count(1)
        self._replies: queue.SimpleQueue[tuple[bool | None, Any]] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._call_lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._read, name="taskfuse-task-reader", daemon=True).start()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.conn.send(message)

    def call(self, *message: Any) -> Any:
        """Ask the driving thread and wait for its answer (raising the error it raised).

        Answers STOPPED without asking once the attempt was told to stop: the worker is
        killing this process and no longer answers.
        """
        with self._call_lock:
            if self.stop.is_set():
                return STOPPED
            self.send(("call", *message))
            ok, value = self._replies.get()
        if ok is None:
            return STOPPED
        if not ok:
            raise value
        return value

    def _read(self) -> None:
        try:
            while True:
                message = self.conn.recv()
                tag = message[0]
                if tag == "run":
                    self.jobs.put(message[1])
                elif tag == "reply":
                    self._replies.put((message[1], message[2]))
                elif tag == "stop":
                    self.stop.set()
                    self._replies.put((None, None))  # a call waiting for a reply gets none
        except (EOFError, OSError):  # the worker closed the pipe, or died: so do we,
            end_group()  # and so does every process the task started
        except BaseException:
            traceback.print_exc()
            os._exit(70)


# -- the context a task function gets ------------------------------------------------------


class ProcessContext:
    """A task function's `ctx` in a task process: TaskContext's surface, over the pipe.

    Cheap answers are local (who the attempt is, its logger, trace headers, the stop flag);
    the store and the fuses are asked of the driving thread, which holds the real context.
    """

    __slots__ = ("_link", "_logger", "info", "payload")

    def __init__(self, link: Link, info: Attempt) -> None:
        self._link = link
        self.info = info
        self.payload: Any = None
        self._logger: TaskLogger | None = None

    def __repr__(self) -> str:
        return (f"ProcessContext(task_id={self.task_id!r}, kind={self.kind!r}, "
                f"attempt={self.attempt}, pid={os.getpid()})")

    @property
    def task_id(self) -> str:
        return self.info.task_id

    @property
    def trace_id(self) -> str:
        return self.info.trace_id

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def attempt(self) -> int:
        return self.info.attempt

    @property
    def batch_id(self) -> str | None:
        return self.info.batch_id

    @property
    def deadline(self) -> float:
        """Wall-clock time (time.time()) after which the watchdog times this attempt out."""
        return self.info.deadline

    @property
    def logger(self) -> TaskLogger:
        """A logger stamping trace_id and task_id; its records are emitted by the worker."""
        if self._logger is None:
            self._logger = task_logger(self.info)  # type: ignore[arg-type]  # same fields
        return self._logger

    def traceparent(self) -> str:
        return w3c.traceparent(self.info.trace_id)

    def http_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return w3c.headers(self.info.trace_id, extra)

    @property
    def stopped(self) -> bool:
        """Whether the worker said stop (it kills this process right after saying so)."""
        return self._link.stop.is_set()

    def cancelled(self) -> bool:
        """Whether this attempt should stop: the stop flag, else the store, via the worker."""
        return self.stopped or self._link.call("cancelled") is not False

    def wait_stop(self, seconds: float) -> bool:
        return self._link.stop.wait(seconds)

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking early when told to stop; True means stop now."""
        return self.wait_stop(seconds) or self.cancelled()

    def raise_if_cancelled(self) -> None:
        if self.cancelled():
            raise TaskCanceled(f"task {self.task_id} was canceled or timed out")

    def heartbeat(self) -> bool:
        """Renew this attempt's lease now (the worker renews it on a timer anyway)."""
        return self._link.call("heartbeat") is True

    def downstream(self, name: str) -> RemoteCall:
        """Guard one call to downstream `name` with the worker's fuses (see RemoteCall)."""
        return RemoteCall(self._link, name)


class RemoteCall:
    """`with ctx.downstream(name):` in a task process: the worker admits the call (breaker,
    bulkhead, token bucket, fleet permits) and records it with the latency measured here,
    so a process task obeys the same fuses as a thread task, counted in the same place."""

    __slots__ = ("_id", "_link", "_name", "_start")

    def __init__(self, link: Link, name: str) -> None:
        self._link = link
        self._name = name
        self._id = next(link.call_ids)
        self._start = 0.0

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` as one logical call with the client's whole policy, as on a
        thread (taskfuse.runtime.calls): `fn` runs here, each attempt admitted by the
        worker's fuses, the budget and the retry decisions kept by the worker."""
        return run_call(self._name, _RemoteSide(self._link, self._name), fn, args, kwargs)

    def __enter__(self) -> RemoteCall:
        if self._link.call("enter", self._id, self._name) is STOPPED:
            raise TaskCanceled(f"stopped before calling downstream {self._name!r}")
        self._start = time.monotonic()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        latency = time.monotonic() - self._start
        kind = None if exc_type is None else call_error_kind(exc)
        self._link.send(("exit", self._id, kind, latency))


class _RemoteSide:
    """`CallSide` in a task process: attempts run here, the client's state is the worker's."""

    __slots__ = ("_link", "_name")

    def __init__(self, link: Link, name: str) -> None:
        self._link = link
        self._name = name

    def begin(self) -> float | None:
        timeout_s: float | None = self._ask("call_begin", self._name)
        return timeout_s

    def attempt(self, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any], timeout_s: float | None) -> Any:
        return attempt_through(RemoteCall(self._link, self._name), time.monotonic, fn, args,
                               kwargs, timeout_s)

    def settle(self, retry: int, kind: str | None,
               previous: float | None) -> tuple[bool, float, str]:
        again, delay, why = self._ask("call_settle", self._name, retry, kind, previous)
        return again, delay, why

    def pause(self, seconds: float) -> bool:
        return self._link.stop.wait(seconds)

    def _ask(self, *message: Any) -> Any:
        value = self._link.call(*message)
        if value is STOPPED:
            raise TaskCanceled(f"stopped while calling downstream {self._name!r}")
        return value


# -- logs ----------------------------------------------------------------------------------


class ForwardHandler(logging.Handler):
    """Sends every record to the worker, which emits it through its own logging."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self.link = link

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.link.send(("log", record_fields(record)))
        except Exception:
            self.handleError(record)


def forward_only(link: Link) -> None:
    """Send every record to the worker and nowhere else.

    Handlers set up here by an import (the main script's basicConfig, a module's own
    handler) exist in the worker too, and would print every line a second time.
    """
    loggers = logging.Logger.manager.loggerDict.values()
    for logger in loggers:
        if isinstance(logger, logging.Logger):
            logger.handlers.clear()
    root = logging.getLogger()
    if not (len(root.handlers) == 1 and isinstance(root.handlers[0], ForwardHandler)):
        root.handlers[:] = [ForwardHandler(link)]


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record as plain values: the message formatted, a traceback as text, extras kept
    (anything not plain as its repr), so it crosses the pipe whatever the task logged."""
    fields = dict(record.__dict__)
    fields["msg"] = record.getMessage()
    fields["args"] = None
    if record.exc_info and not record.exc_text:
        fields["exc_text"] = _FORMATTER.formatException(record.exc_info)
    fields["exc_info"] = None
    return {k: v if isinstance(v, _PLAIN) else repr(v) for k, v in fields.items()}


# -- the main loop -------------------------------------------------------------------------


def serve(conn: Connection, preload: tuple[str, ...] = ()) -> None:
    """The task process's main (a multiprocessing target): serve jobs until killed.

    First it imports the functions of `preload` (``module:qualname``), then says ("ready",
    failures): a module's import time is spent before the first attempt's clock runs, not
    inside it. A function that fails here is tried again by the job that needs it, which
    reports the failure as that attempt's outcome, as before.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_term)
    os.setpgid(0, 0)  # a group of its own, which the worker kills as one (module doc)
    link = Link(conn)
    forward_only(link)
    route_python_output()
    link.start()
    functions: dict[str, Callable[..., Any]] = {}
    failures = []
    for ref in preload:
        try:
            functions[ref] = resolve(ref)
        except Exception as exc:
            failures.append((ref, repr(exc)))
    forward_only(link)  # the imports may have added handlers
    link.send(("ready", failures))
    while True:
        job = link.jobs.get()
        link.send(run(link, job, functions))


class _Terminated(SystemExit):
    """SIGTERM's SystemExit: the one BaseException `run` lets end the process."""


def _exit_on_term(signum: int, frame: FrameType | None) -> None:
    raise _Terminated(128 + signum)


def end_group() -> None:
    """Exit at once, taking every process of this one's group along (SIGKILL to the group,
    this process included); a process that leads no group just exits."""
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(0)


def run(link: Link, job: Job, functions: dict[str, Callable[..., Any]]) -> tuple[Any, ...]:
    """One attempt, as the "done" message that reports how it ended."""
    root_level, taskfuse_level = job.levels
    logging.getLogger().setLevel(root_level)
    logging.getLogger("taskfuse").setLevel(taskfuse_level)
    ctx = ProcessContext(link, job.attempt)
    try:
        fn = functions.get(job.fn)
        if fn is None:
            fn = functions[job.fn] = resolve(job.fn)
            forward_only(link)  # the import may have added handlers
    except Exception as exc:
        return _refused(ctx, BAD_CONFIG,
                        f"cannot import task function {job.fn!r} in the task process: {exc!r}")
    try:
        ctx.payload = decode(job.serializer, job.payload)
    except Exception as exc:
        return _refused(ctx, PAYLOAD_UNSERIALIZABLE,
                        f"the payload cannot be read as {job.serializer} in the task "
                        f"process: {exc}")
    if job.prints and not isinstance(sys.stdout, PrintedLines):
        sys.stdout = PrintedLines(sys.stdout)
    try:
        with TaskOutput(ctx):
            result = fn(ctx, ctx.payload)
    except _Terminated:
        raise
    except BaseException as exc:  # sys.exit() in a task ends the attempt, not the process
        outcome = attempt_failure(ctx.logger, exc)
        return ("done", False, outcome.error_kind, outcome.error_msg)
    try:
        data = encode(job.serializer, result)
    except Exception as exc:
        return _refused(ctx, RESULT_UNSERIALIZABLE,
                        f"the result ({type(result).__name__}) cannot cross to the worker "
                        f"as {job.serializer}: {exc}")
    return ("done", True, data, None)


def resolve(ref: str) -> Callable[..., Any]:
    """The function `module:qualname` refers to (importing its module)."""
    module, _, qualname = ref.partition(":")
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is a {type(obj).__name__}, not a function")
    fn: Callable[..., Any] = obj
    return fn


def _refused(ctx: ProcessContext, kind: str, message: str) -> tuple[Any, ...]:
    """A failure no retry can fix, logged as one line (the message says what and where)."""
    ctx.logger.warning("%s: %s", kind, message)
    return ("done", False, kind, message)
