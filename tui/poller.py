"""One long-lived thread for a store's questions, asked in order.

Why not a Textual thread worker per poll: each worker is a new thread, and a store opens one
connection per thread (SQLite keeps it until the store closes), so polling once a second
would open a connection a second. Jobs are callables that post their answers as messages;
the UI thread never waits for one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Poller:
    """Runs submitted jobs one after another on its own daemon thread."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def submit(self, job: Callable[[], None]) -> None:
        if not self._started:
            self._started = True
            self._thread.start()
        self._jobs.put(job)

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the jobs already submitted (waits at most `timeout`)."""
        if self._started:
            self._jobs.put(None)
            self._thread.join(timeout)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()  # a job catches its own errors and posts them
