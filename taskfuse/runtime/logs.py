"""Log formatting for operators: plain text with the trace_id, or one JSON object a line.

Task loggers (`ctx.logger`) and the runner stamp `trace_id` and `task_id` on their records;
these formatters print them when present, so `grep TRACE_ID` over a worker's log (or a query
in a log store over the JSON field) finds every line of one task.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

from taskfuse.store.redaction import redact_text

#: Record attributes copied into the JSON object when a logger set them.
CONTEXT_FIELDS = ("trace_id", "task_id", "kind", "attempt", "worker")


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
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        elif record.exc_text:  # formatted where it happened (a record from a task process)
            out["error"] = record.exc_text
        # no credential in any line: masked in each text before it is escaped as JSON
        return json.dumps({k: redact_text(v) if isinstance(v, str) else v
                           for k, v in out.items()}, default=str)


class TextFormatter(logging.Formatter):
    """`time level logger [trace_id task_id] message`: readable, and greppable by trace_id."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ctx)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        trace, task = getattr(record, "trace_id", None), getattr(record, "task_id", None)
        record.ctx = f" [{trace} {task}]" if trace or task else ""
        return redact_text(super().format(record))  # no credential in any line


def configure(
    level: int = logging.INFO, json_lines: bool = False, stream: IO[str] | None = None
) -> logging.Handler:
    """Send taskfuse's logs to `stream` (stderr) as text or JSON lines; returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger("taskfuse")
    root.addHandler(handler)
    root.setLevel(level)
    return handler
