"""Log formatting for operators: plain text with the trace_id, or one JSON object a line.

Task loggers (`ctx.logger`) and the runner stamp `trace_id` and `task_id` on their records;
these formatters print them when present, so `grep TRACE_ID` over a worker's log (or a query
in a log store over the JSON field) finds every line of one task. Both mask credentials
(`redact_text`) in every line they write.

Two ways in, for two owners:

* `configure` attaches a handler to the ``taskfuse`` logger only. A program that embeds the
  library keeps its own root logger, its warnings and its thread hooks: this changes none.
* `process_logging` is for the processes the ``taskfuse`` command runs (``taskfuse worker``,
  ``taskfuse sweep``): the command owns the process, so every line it prints goes through
  one format. Its handler sits on the root logger, so the libraries' own records (psycopg's
  and psycopg_pool's reconnect warnings, which otherwise reach Python's last-resort handler
  as bare multi-line text) come out like ours; `warnings.warn` is routed into logging
  (``py.warnings``); an exception that ends a thread (``threading.excepthook``) or that
  Python can only ignore (``sys.unraisablehook``: a failing ``__del__``) is logged with its
  traceback; and a record that cannot be formatted becomes one line saying so, where the
  logging module would print a multi-line report. Everything is restored when it ends.
  With `capture_stdout` (``taskfuse worker``) what task code prints becomes records too
  (`PrintedLines`): a line printed by a task is a record of that task's logger, stamped with
  its trace_id and task_id, as Celery's workers redirect their tasks' stdout.

In JSON every record is one line (newlines inside a message or a traceback are escaped).
In text a record starts with its time and level on one line, its message folded into it,
and a traceback follows on lines indented by four spaces; control characters anywhere (a
kind or an id holding a newline or a terminal escape sequence) are escaped (`shown`), so
no name can forge a line or reach the terminal as a command.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from taskfuse.store.redaction import redact_text
from taskfuse.textable import shown

#: Record attributes copied into the JSON object when a logger set them.
CONTEXT_FIELDS = ("trace_id", "task_id", "kind", "attempt", "worker")
#: Libraries log at this level and above while the command owns the process (the
#: ``taskfuse`` loggers keep their own: INFO, DEBUG with -v).
LIBRARY_LEVEL = logging.WARNING
_INDENT = "    "


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the task's context, error."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        error = _error_text(self, record)
        if error:
            out["error"] = error
        # no credential in any line: masked in each text before it is escaped as JSON
        return json.dumps({k: redact_text(v) if isinstance(v, str) else v
                           for k, v in out.items()}, default=str)


class TextFormatter(logging.Formatter):
    """`time level logger [trace_id task_id] message`: readable, and greppable by trace_id.

    The message is folded onto its line (its own line breaks become `` | ``), so every
    record starts with its time; a traceback follows on indented lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ctx)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        trace, task = getattr(record, "trace_id", None), getattr(record, "task_id", None)
        record.ctx = f" [{trace} {task}]" if trace or task else ""
        record.message = fold(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        name = record.name  # a task's logger is named by its kind, a user's text
        try:
            record.name = shown(name)
            line = shown(self.formatMessage(record))  # one line whatever a name holds
        finally:
            record.name = name
        error = _error_text(self, record)
        if error:
            line += "\n" + "\n".join(_INDENT + shown(part) for part in error.splitlines())
        return redact_text(line)  # no credential in any line


def fold(text: str) -> str:
    """Text on one line: its lines stripped and joined with `` | `` (blank ones dropped)."""
    if "\n" not in text and "\r" not in text:
        return text
    return " | ".join(part.strip() for part in text.splitlines() if part.strip())


def _error_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback (formatted here, or where it happened: a task process) and
    stack, or ""."""
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    elif record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return "\n".join(parts)


def formatter(json_lines: bool) -> logging.Formatter:
    return JsonFormatter() if json_lines else TextFormatter()


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose own failures are one record in its format.

    The logging module reports a record it cannot format (a bad ``%`` argument in someone's
    call) with a multi-line "--- Logging error ---" on stderr; this writes one line naming
    the logger and the call site instead, and never raises."""

    def handleError(self, record: logging.LogRecord) -> None:
        if not logging.raiseExceptions:
            return
        cause = sys.exc_info()[1]
        try:
            note = logging.LogRecord(
                "taskfuse.logs", logging.ERROR, record.pathname, record.lineno,
                "could not format a record of logger %s at %s:%d: %s: %s",
                (record.name, record.pathname, record.lineno, type(cause).__name__, cause),
                None)
            self.stream.write(self.format(note) + self.terminator)
            self.flush()
        except Exception:  # the stream itself is gone: nowhere left to say so
            pass


def configure(
    level: int = logging.INFO, json_lines: bool = False, stream: IO[str] | None = None
) -> logging.Handler:
    """Send taskfuse's logs to `stream` (stderr) as text or JSON lines; returns the handler.

    Only the ``taskfuse`` logger is touched: what a program embedding the library does with
    its root logger, warnings and hooks stays its own (`process_logging` is the command's)."""
    handler = LineHandler(stream or sys.stderr)
    handler.setFormatter(formatter(json_lines))
    root = logging.getLogger("taskfuse")
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """`threading.excepthook`: the exception that ended a thread, as one log record."""
    if args.exc_type is SystemExit:  # what the default hook does: a thread may exit so
        return
    name = args.thread.name if args.thread is not None else "?"
    exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    logging.getLogger("threading").error("uncaught exception in thread %s", name,
                                         exc_info=exc_info)  # type: ignore[arg-type]


def _log_unraisable(args: Any) -> None:
    """`sys.unraisablehook`: an exception Python could only ignore (in a __del__, a
    finalizer), as one log record instead of "Exception ignored in: ..." text."""
    what = args.err_msg or "Exception ignored in"
    where = f": {args.object!r}" if args.object is not None else ""
    exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    logging.getLogger("sys.unraisable").error("%s%s", what, where,
                                              exc_info=exc_info if args.exc_type else None)


def route_python_output() -> None:
    """Send what Python itself prints (warnings, an exception that ends a thread, one it
    could only ignore) through logging, for good: a task process has no command that could
    give the hooks back, and its stderr is the worker's, where raw text would break the
    worker's log format."""
    logging.captureWarnings(True)
    threading.excepthook = _log_thread_exception
    sys.unraisablehook = _log_unraisable


#: Where a line printed outside any task goes, while stdout is captured.
PRINT_LOGGER = "taskfuse.print"
#: The attempt this thread runs now (`TaskOutput`): its context, whose `logger` is made
#: only when it is first asked for.
_current = threading.local()


class TaskOutput:
    """While a task function runs on this thread, what it prints is a record of
    `owner.logger` (the task's context: its logger is only made if the task prints). When
    stdout is not captured (`PrintedLines`) this only sets a thread local: it runs around
    every attempt."""

    __slots__ = ("_owner", "_previous")

    def __init__(self, owner: Any) -> None:
        self._owner = owner
        self._previous: Any = None

    def __enter__(self) -> None:
        self._previous = getattr(_current, "owner", None)
        _current.owner = self._owner

    def __exit__(self, *exc: object) -> None:
        out = sys.stdout
        if isinstance(out, PrintedLines):
            out.end_line()  # a last line without its newline is still the task's
        _current.owner = self._previous


class PrintedLines(io.TextIOBase):
    """sys.stdout while a worker runs tasks: each line printed (print(), a library writing
    to stdout) becomes an INFO record of the task's logger, or of ``taskfuse.print`` outside
    a task, so the worker's log stays in one format and every line says which task printed
    it. Each thread keeps its own partial line. `raw` is the stdout it stands for: its file
    descriptor is what a child process inherits, and a record that would print to stdout
    itself goes there instead of looping."""

    def __init__(self, raw: IO[str]) -> None:
        super().__init__()
        self.raw = raw
        self._local = threading.local()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase says None
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def buffer(self) -> Any:
        """The real stdout's bytes: what is written there goes out as it is, uncaptured
        (`sys.stdout.buffer.write`, which some libraries use, keeps working)."""
        return self.raw.buffer

    def fileno(self) -> int:
        return self.raw.fileno()

    def write(self, s: str) -> int:
        local = self._local
        if getattr(local, "emitting", False):  # a handler writing to stdout: no loop
            return self.raw.write(s)
        *lines, local.text = (getattr(local, "text", "") + s).split("\n")
        for line in lines:
            self._emit(line)
        return len(s)

    def end_line(self) -> None:
        """Emit this thread's unfinished line, if any."""
        text = getattr(self._local, "text", "")
        if text:
            self._local.text = ""
            self._emit(text)

    def _emit(self, line: str) -> None:
        owner = getattr(_current, "owner", None)
        logger = owner.logger if owner is not None else logging.getLogger(PRINT_LOGGER)
        self._local.emitting = True
        try:
            logger.info("%s", line.rstrip("\r"))
        finally:
            self._local.emitting = False


#: The formatter of the process's logging while `process_logging` runs (for `line`).
_active: list[logging.Formatter] = []


@contextmanager
def process_logging(
    level: int = logging.INFO, json_lines: bool = False, stream: IO[str] | None = None,
    capture_stdout: bool = False,
) -> Iterator[logging.Handler]:
    """Own the process's logging while a command runs (see the module doc); yields the
    handler. `level` is the ``taskfuse`` loggers'; libraries log at WARNING and above.
    `capture_stdout`: what is printed becomes records (`PrintedLines`)."""
    handler = LineHandler(stream or sys.stderr)
    fmt = formatter(json_lines)
    handler.setFormatter(fmt)
    root, ours = logging.getLogger(), logging.getLogger("taskfuse")
    saved = (root.level, ours.level, threading.excepthook, sys.unraisablehook)
    root.addHandler(handler)
    root.setLevel(LIBRARY_LEVEL)
    ours.setLevel(level)
    route_python_output()
    _active.append(fmt)
    stdout = sys.stdout
    if capture_stdout:
        sys.stdout = PrintedLines(stdout)
    try:
        yield handler
    finally:
        if sys.stdout is not stdout and isinstance(sys.stdout, PrintedLines):
            sys.stdout.end_line()
            sys.stdout = stdout
        _active.remove(fmt)
        logging.captureWarnings(False)
        root.removeHandler(handler)
        root.setLevel(saved[0])
        ours.setLevel(saved[1])
        threading.excepthook, sys.unraisablehook = saved[2], saved[3]


def line(level: int, message: str, *, json_lines: bool | None = None,
         error: str | None = None, name: str = "taskfuse.cli") -> str:
    """One record as the line the process's logging prints, without logging it: for a
    signal handler (which must not take the logging module's locks) and for a command's last
    word after its logging ended. `json_lines` None means the format `process_logging` is
    using; with neither, `message` (and `error` below it) as plain text. Always redacted."""
    fmt = (_active[-1] if _active else None) if json_lines is None else (
        formatter(json_lines) if json_lines else None)
    if fmt is None:
        return redact_text(message + (f"\n{error.rstrip()}" if error else ""))
    record = logging.LogRecord(name, level, __file__, 0, message, None, None)
    record.exc_text = error
    return fmt.format(record)
