"""Whether the store accepts writes: said once when it stops growing, once when it grows again.

Every role that writes (claimer, completer, watchdog, heartbeat) meets a full store
(`StoreFull`) at about the same moment and retries as it would anyway; this keeps the one
log line and the flag a drain ends on (`Runner.store_full`), instead of one per role and retry.
"""

from __future__ import annotations

import logging
import threading

from taskfuse.store import StoreFull

log = logging.getLogger("taskfuse.runtime")

#: Longest pause after a store error in a claim or commit loop (the pause doubles up to it).
MAX_ERROR_PAUSE_S = 1.0


def next_pause(pause: float) -> float:
    """The pause after one more store error in a row: 50 ms, doubling, at most a second."""
    return min(MAX_ERROR_PAUSE_S, max(0.05, pause * 2))


class StoreHealth:
    """The store's refusal to grow, if any (module doc)."""

    def __init__(self) -> None:
        #: Set while the store refuses to grow (`StoreFull`): said once, not per retry.
        self.full: StoreFull | None = None
        self._mu = threading.Lock()

    def said_full(self, exc: Exception) -> bool:
        """Whether `exc` says the store cannot grow: logged in one line the first time, and
        kept in `full` (a drain ends on it); the caller retries as it would anyway."""
        if not isinstance(exc, StoreFull):
            return False
        with self._mu:  # several threads meet it at once: one line
            said, self.full = self.full is not None, exc
        if not said:
            log.error("%s; tasks stay as they are in the store until it can grow", exc)
        return True

    def not_full(self) -> None:
        """A write went through: the store grows again (said once)."""
        if self.full is None:  # the common case, without the lock
            return
        with self._mu:
            was, self.full = self.full, None
        if was is not None:
            log.info("the store accepts writes again")
