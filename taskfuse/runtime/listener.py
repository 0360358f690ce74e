"""The listener: the store's own wake-ups (PostgreSQL notifications, SQLite's data_version)
turned into a look by the claimer and the joiners, so an idle worker does not poll."""

from __future__ import annotations

import logging
from collections.abc import Callable

from taskfuse.runtime.shared import Shared

log = logging.getLogger("taskfuse.runtime")

#: The longest one wait for a wake-up lasts (the loop then looks at `closing`).
LISTEN_BOUND_S = 1.0


class Listener:
    """Waits in the store's `wait_for_work` and wakes the worker (module doc)."""

    def __init__(self, shared: Shared, wait_for_work: Callable[[float], bool]) -> None:
        self.shared = shared
        self._wait_for_work = wait_for_work

    def run(self) -> None:
        """Until the worker closes: every wake-up of the store is a `changed`."""
        sh = self.shared
        while not sh.closing.is_set():
            try:
                woke = self._wait_for_work(LISTEN_BOUND_S)
            except Exception:
                if sh.closing.is_set():  # the store was closed after our shutdown: done
                    return
                log.exception("waiting for work notifications failed")
                sh.closing.wait(1.0)
                continue
            if woke:
                sh.changed()
