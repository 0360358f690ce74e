"""The listener: the store's own wake-ups, turned into a look by the claimer and the joiners.

The store says when another actor changed something (PostgreSQL: a notification on the work
channel, delivered at commit; SQLite: `PRAGMA data_version` moved), so an idle worker does
not poll. The same wake-up carries a batch's cancel by another process (the CLI, another
worker): a cancel of RUNNING tasks of a batch notifies the work channel, and on SQLite it
is a commit. So after a wake-up (at most every LOOK_GAP_S) the listener asks, for each
batch it holds attempts of (buffered, running, on the loop), whether the batch has any
unfinished task left (one probe of the (batch_id, status) index). None left means each of
those attempts ended elsewhere: the claimed-ahead ones leave the buffer unrun and the
running ones are told to stop at once, instead of at the next heartbeat (which would have
run the buffered ones meanwhile). Attempts claimed after the question are not touched: a
batch retried meanwhile keeps them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from taskfuse.runtime.shared import Shared

log = logging.getLogger("taskfuse.runtime")

#: The longest one wait for a wake-up lasts (the loop then looks at `closing`).
LISTEN_BOUND_S = 1.0
#: The shortest time between two looks for ended batches. A busy fleet wakes the listener
#: at every commit group of batch tasks; a look at each cost +30 % CPU per task on
#: PostgreSQL (2,000 no-op tasks of one batch), one every 50 ms costs nothing measurable.
LOOK_GAP_S = 0.05


class Listener:
    """Waits in the store's `wait_for_work` and wakes the worker (module doc)."""

    def __init__(self, shared: Shared, wait_for_work: Callable[[float], bool]) -> None:
        self.shared = shared
        self._wait_for_work = wait_for_work

    def run(self) -> None:
        """Until the worker closes: every wake-up of the store is a `changed`, and a look
        for ended batches at most every LOOK_GAP_S (the last wake-up of a burst included)."""
        sh = self.shared
        owed, next_look = False, 0.0
        while not sh.closing.is_set():
            wait = LISTEN_BOUND_S if not owed else max(0.0, next_look - time.monotonic())
            try:
                woke = self._wait_for_work(wait)
            except Exception:
                if sh.closing.is_set():  # the store was closed after our shutdown: done
                    return
                log.exception("waiting for work notifications failed")
                sh.closing.wait(1.0)
                continue
            if woke:
                sh.changed()
                owed = True
            if owed and time.monotonic() >= next_look:
                owed, next_look = False, time.monotonic() + LOOK_GAP_S
                self.look_for_ended_batches()

    def look_for_ended_batches(self) -> None:
        """Let go the attempts of every held batch that has no unfinished task (module doc)."""
        sh = self.shared
        with sh.attempts.mu:
            held = sh.attempts.held_batches()
        for batch_id, keys in held.items():
            try:
                ended = not sh.store.has_unfinished(batch_id)
            except Exception:  # the heartbeat still finds them; say why this did not
                log.warning("could not ask whether batch %s ended", batch_id, exc_info=True)
                continue
            if ended:
                sh.let_go(keys, f"batch {batch_id} ended elsewhere (canceled)")
