"""A small App for fleet tests of the `taskfuse worker` command: `--app
tests.runtime.effects_app:app`. Each run of an `effect` task appends one line, "WORKER TASK_ID",
to the file named by $TASKFUSE_TEST_EFFECTS (one write in append mode, so lines of several
processes never mix): the test counts executions from it, not from the store. With
$TASKFUSE_TEST_EFFECT_S an effect also takes that long (a fleet test's tasks last long enough
that one process cannot drain them all before the others' first claims on a busy machine)."""

from __future__ import annotations

import os
import time
from typing import Any

from taskfuse.runtime import App, TaskContext

app = App("effects", lease_s=30.0)


@app.task("effect", timeout=60)
def effect(ctx: TaskContext, payload: Any) -> None:
    line = f"{ctx.task.worker_id} {ctx.task_id}\n".encode()
    fd = os.open(os.environ["TASKFUSE_TEST_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get("TASKFUSE_TEST_EFFECT_S", "0")))
