"""Tasks a test releases one by one: each waits for its gate file, then ends as the file says.

A test that compares the monitor with the store at chosen moments needs a run that holds
still between them; a task that sleeps would end whenever the machine gets to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taskfuse.runtime import App, TaskContext

app = App("gate")


@app.task("gate", max_retry=0, timeout=600)
def gate(ctx: TaskContext, payload: dict[str, Any]) -> str:
    """Wait for `payload["gate"]` to exist; its text "fail" fails the task for good."""
    path = Path(payload["gate"])
    while not path.exists():
        if ctx.sleep(0.05):
            return "stopped"
    if path.read_text() == "fail":
        raise ValueError("told to fail")
    return "ok"
