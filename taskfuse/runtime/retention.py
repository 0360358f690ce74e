"""Retention: deleting ended tasks once they are old, without stalling the workers.

Theory of operation
-------------------
* Only ended tasks go (SUCCESS, FAILED, TIMEOUT, CANCELED, or fewer), and only those that
  finished before the cutoff; never a PENDING or RUNNING task, and never a task a PENDING
  or RUNNING dependent still waits for (the stores' `prune` checks that in the statement
  that deletes).
* In chunks: each chunk is one short transaction of at most `chunk` rows, then a pause of
  at least YIELD_RATIO times what the chunk took (and at least `pause_s`), so the workers'
  claims and commits take their turns between chunks: a prune holds the store (SQLite's one
  write lock, PostgreSQL's rows and I/O) about a tenth of the time at most. With a fixed
  20 ms pause, 4 worker processes on SQLite drained 30 % slower while a prune ran (its
  500-row chunks took about as long as the pause); benchmarks/test_bench_ops.py.
* The kept counts (by status and by batch) follow by themselves: both stores keep them with
  triggers that fire on every delete.
* Run by hand (`taskfuse prune`), or by the sweeper on its interval when the limits file
  sets `sweeper.retention_s`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from taskfuse.core.states import TERMINAL, TaskfuseError, TaskStatus, parse_statuses

#: Rows per transaction: a few milliseconds of a writer's time on either store.
PRUNE_CHUNK = 500
#: The shortest pause between chunks: the room the workers get to write in.
PAUSE_S = 0.02
#: The pause after a chunk is at least this many times the chunk's own time.
YIELD_RATIO = 9.0
#: The ended statuses, in the table's order.
ENDED: tuple[TaskStatus, ...] = tuple(s for s in TaskStatus if s in TERMINAL)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


class RetentionError(TaskfuseError):
    """A prune that cannot be done as asked (a bad age or status)."""


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '45s' or plain seconds as seconds (> 0)."""
    match = _AGE.match(text.lower())
    if not match or float(match.group(1)) <= 0:
        raise RetentionError(f"age {text!r} is not a positive duration: expected a number with "
                             "an optional unit s, m, h, d or w (e.g. 7d)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def parse_ended(text: str) -> tuple[TaskStatus, ...]:
    """'SUCCESS,CANCELED' as ended statuses; TaskfuseError naming a live or unknown one."""
    return parse_statuses(text, ENDED, "pruned")


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, dry, would remove), by status."""

    removed: dict[TaskStatus, int] = field(default_factory=dict)
    chunks: int = 0
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.removed.values())


def prune(store: Any, older_than_s: float, now: float, *,
          statuses: tuple[TaskStatus, ...] = ENDED, batch_id: str | None = None,
          dry_run: bool = False, chunk: int = PRUNE_CHUNK, pause_s: float = PAUSE_S,
          stop: threading.Event | None = None) -> PruneReport:
    """Delete the ended tasks in `statuses` that finished more than `older_than_s` before
    `now` (of one batch when `batch_id`), `chunk` rows per transaction; `stop` ends it
    between chunks. A dry run counts what would go and deletes nothing. `pause_s` 0 (tests)
    pauses not at all."""
    if older_than_s <= 0:
        raise RetentionError(f"older_than must be > 0 seconds, got {older_than_s!r}")
    bad = [s for s in statuses if s not in TERMINAL]
    if bad:
        raise RetentionError(f"status {bad[0].value!r} is not an ended status: never pruned")
    cutoff = now - older_than_s
    if dry_run:
        return PruneReport(dict(store.prunable(cutoff, statuses, batch_id)), 0, True)
    report = PruneReport()
    pause = stop or threading.Event()
    while True:
        began = time.monotonic()
        gone = store.prune(cutoff, statuses, batch_id, chunk)
        took = time.monotonic() - began
        report.chunks += 1
        for status, n in gone.items():
            report.removed[status] = report.removed.get(status, 0) + n
        rest = max(pause_s, YIELD_RATIO * took) if pause_s > 0 else 0.0
        if sum(gone.values()) < chunk or pause.wait(rest):
            return report
