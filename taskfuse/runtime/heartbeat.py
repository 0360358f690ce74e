"""The heartbeat: every held attempt's lease in one statement, the fleet permits, the beat.

Every `every_s` it renews the lease of each attempt held here, buffered, running, on the
loop or waiting for its commit (`heartbeat_many`); an attempt whose renewal the store
refuses (its task was canceled, timed out or taken over elsewhere) is told to stop, that
attempt only (a retry of the same task may run here too). It keeps the fleet permits of
calls in progress from lapsing, and says what this process is doing (`WorkerBeat`) to the
fleet view.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from taskfuse.core.storeapi import WorkerBeat
from taskfuse.runtime.attempts import key_of
from taskfuse.runtime.fleet_limits import FleetLimits
from taskfuse.runtime.shared import Shared

log = logging.getLogger("taskfuse.runtime")


class Heartbeat:
    """Leases, fleet permits and this worker's beat (module doc)."""

    def __init__(self, shared: Shared, every_s: float, fleet: Mapping[str, FleetLimits],
                 app_name: str, workers: int) -> None:
        self.shared = shared
        self.every_s = every_s
        self._fleet = fleet
        self._app_name = app_name
        self._workers = workers
        #: When the worker started (its clock): set by the runner's start.
        self.started_at = 0.0

    def run(self) -> None:
        """Beat until the worker closes."""
        sh = self.shared
        self.beat_worker()
        while not sh.closing.wait(self.every_s):
            with sh.attempts.mu:
                held = sh.attempts.in_flight()
            now = sh.clock()
            try:
                renewed = sh.scheduler.heartbeat_many(held, now)
            except Exception as exc:
                if not sh.health.said_full(exc):
                    log.exception("heartbeat of %d task(s) failed; their leases decide",
                                  len(held))
                renewed = [True] * len(held)
            for task, ok in zip(held, renewed, strict=True):
                if not ok:  # this attempt only: a retry of the same task may run here too
                    sh.stop_task(task.task_id, key_of(task))
            self._renew_permits()
            self.beat_worker()

    def worker_beat(self, stopped: bool = False) -> WorkerBeat:
        """What this process says of itself to the fleet (`Store.beat_worker`)."""
        sh = self.shared
        at = sh.attempts
        with at.mu:
            stuck = [s.kind for s in at.stuck.values()]
            busy = at.busy()
            stats = sh.stats
            counts = (stats.claimed, stats.completed, stats.discarded)
            failed = stats.failed
        kinds: dict[str, int] = {}
        for kind in stuck:
            kinds[kind] = kinds.get(kind, 0) + 1
        return WorkerBeat(sh.worker_id, self._app_name, self._workers, max(0, busy),
                          len(stuck), kinds, *counts, self.started_at, sh.clock(), stopped,
                          failed)

    def beat_worker(self, stopped: bool = False) -> None:
        """Record this worker's beat; a store that does not answer is logged, not raised."""
        sh = self.shared
        try:
            sh.scheduler.store.beat_worker(self.worker_beat(stopped))
        except Exception as exc:
            if not sh.health.said_full(exc):
                log.warning("could not record this worker's beat", exc_info=True)

    def _renew_permits(self) -> None:
        """Keep the fleet permits of calls in progress here from lapsing while we are alive."""
        for limits in self._fleet.values():
            if limits.bulkhead is None:
                continue
            try:
                lost = limits.renew_all()
            except Exception:
                log.exception("renewing fleet permits of %r failed", limits.name)
                continue
            if lost:
                log.warning("%d fleet permit(s) of downstream %r lapsed before renewal",
                            lost, limits.name)
