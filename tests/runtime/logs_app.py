"""An App whose tasks make every kind of line a worker process can print: its own records, a
`warnings.warn`, an exception that ends a thread, a log call that cannot be formatted (and a
secret in each). `--app tests.runtime.logs_app:app` (tests/runtime/test_worker_logs.py)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

from taskfuse.runtime import App, TaskContext

app = App("logs-tests", lease_s=5.0)

#: What the odd tasks put in their lines: a URL whose password the worker must mask.
LEAKY_URL = "postgresql://alice:Th1sMustNotLeak@db.example/app"


@app.task("work", timeout=30)
def work(ctx: TaskContext, payload: Any) -> Any:
    ctx.sleep(0.02)
    return payload


@app.task("warn", timeout=30)
def warn(ctx: TaskContext, payload: Any) -> str:
    warnings.warn(f"deprecated call\nsecond line, from {LEAKY_URL}", UserWarning, stacklevel=1)
    return "warned"


@app.task("crash_thread", timeout=30)
def crash_thread(ctx: TaskContext, payload: Any) -> str:
    def fail() -> None:
        raise RuntimeError(f"helper thread failed talking to {LEAKY_URL}")

    helper = threading.Thread(target=fail, name="helper")
    helper.start()
    helper.join()
    return "crashed a thread"


@app.task("bad_log", timeout=30)
def bad_log(ctx: TaskContext, payload: Any) -> str:
    ctx.logger.info("rows: %d", "not a number")  # the logging module cannot format this
    return "logged badly"
