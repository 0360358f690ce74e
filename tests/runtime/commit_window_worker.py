"""A worker process for the commit-window test: it runs tasks whose side effect is a line in a
file, and its store stalls the commit of outcome groups after the first `ok_groups` (the
window between a task's end and its commit, held open so the test can kill -9 in it).

    python -m tests.runtime.commit_window_worker DB EFFECTS OK_GROUPS [WORKER_ID]

It prints "stalled N" once a commit of N outcomes is being held (the test's signal to kill),
and "drained" when it finds nothing left to do (a normal worker's end).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from taskfuse.core.task import Task
from taskfuse.runtime import App, Runner
from taskfuse.store.sqlite import SQLiteStore


class StallingStore(SQLiteStore):
    """The real SQLite store; past `ok_groups` outcome groups, a group is never committed."""

    def __init__(self, path: str, ok_groups: int) -> None:
        super().__init__(path)
        self.ok_groups = ok_groups
        self.groups = 0
        self._stall = threading.Event()

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        self.groups += 1
        if self.ok_groups >= 0 and self.groups > self.ok_groups:
            print(f"stalled {len(moves)}", flush=True)
            self._stall.wait()  # forever: the test kills the process here
        return super().swap_many(moves)


def main(argv: list[str]) -> int:
    db, effects, ok_groups = argv[0], argv[1], int(argv[2])
    worker_id = argv[3] if len(argv) > 3 else f"window:{os.getpid()}"
    app = App("window", lease_s=1.0)

    @app.task("effect", timeout=30, max_retry=3)
    def effect(ctx: Any, payload: Any) -> str:
        with open(effects, "a") as out:  # the side effect: once per execution
            out.write(f"{ctx.task_id} {ctx.attempt}\n")
        return "done"

    store = StallingStore(db, ok_groups)
    with Runner(app, store, workers=2, worker_id=worker_id, heartbeat_s=0.2,
                group_wait_s=0.05) as runner:
        runner.join()
    print("drained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
