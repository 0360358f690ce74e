"""Tasks that print, on a thread and in a task process, for `taskfuse worker` tests."""

from __future__ import annotations

import sys
from typing import Any

from taskfuse.runtime import App

app = App("prints")


def say(ctx: Any, payload: Any) -> str:
    """Two lines in one print, then a last line without its newline."""
    print(f"hello from {ctx.task_id}\nsecond line of {ctx.task_id}")
    sys.stdout.write(f"unfinished line of {ctx.task_id}")
    return "said"


app.task("say")(say)
app.task("say_in_process", executor="process")(say)
