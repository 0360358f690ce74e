"""A small App for the command-line tests: `--app tests.runtime.sample_app:app`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from taskfuse.runtime import App, TaskContext, TaskError

app = App("cli-tests", lease_s=5.0)
not_an_app = object()


@app.task("echo", timeout=10)
def echo(ctx: TaskContext, payload: Any) -> Any:
    return payload


@app.task("nap", timeout=60)
def nap(ctx: TaskContext, payload: float) -> str:
    """Sleeps cooperatively: a stop signal (cancel, release at shutdown) ends it at once."""
    return "stopped" if ctx.sleep(payload) else "rested"


@app.task("stubborn", timeout=60)
def stubborn(ctx: TaskContext, payload: Any) -> str:
    """Ignores its context: only a second signal gets the worker process out. A payload
    {"s": seconds, "began": path} writes `path` first: a test's sign that its code runs
    (RUNNING in the store is already true of a claimed task still in the buffer)."""
    if isinstance(payload, dict):
        Path(payload["began"]).touch()
        payload = payload["s"]
    time.sleep(payload)
    return "done"


@app.task("reject", max_retry=0)
def reject(ctx: TaskContext, payload: Any) -> None:
    raise TaskError("bad_params", f"cannot use {payload!r}")


@app.task("heap")
def heap(ctx: TaskContext, payload: Any) -> dict[str, int]:
    """The collector's settings in the worker process, as a task sees them."""
    import gc

    return {"threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}
