"""What the durable stores share: named queries, numbered migrations, the row <-> Task codec.

Layout (procrastinate's): every statement lives in a ``.sql`` file beside this module, under
a header naming it::

    -- claim_candidates --
    -- Ready rows in claim order; the comment lines after the name are its docstring.
    SELECT ...

``load_queries("sqlite")`` reads ``sqlite_queries.sql`` into ``{name: sql}``. Schema changes
are numbered files ``{dialect}_NNNN_{what}.sql``; a store applies the ones its database has
not seen yet and records them in ``taskfuse_migrations`` (see `migrations`). Keeping SQL out of
Python makes it reviewable as SQL and lets the two dialects differ only where they must.

Columns of the ``tasks`` table are the `Task` fields (same names; every SELECT of a task
lists them in `Task` order, so a column a later migration appended reads in its place) and
bookkeeping that is not part of the record: ``unmet`` (dependencies not yet SUCCESS, kept by
the store), ``ready_tick`` / ``run_tick`` (when the row last became claimable / was claimed,
from one monotonic counter, so ties in claim and deadline order break exactly as
MemoryStore's heaps do), ``claim_token`` (finds a claim again after a connection broke during
its commit), and the derived ``ready_at`` / ``deadline``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from taskfuse.core.states import TRANSITIONS, TaskEvent, TaskfuseError, TaskStatus
from taskfuse.core.storeapi import WorkerBeat, beat_of
from taskfuse.core.task import TASK_FIELDS, Task
from taskfuse.store.failures import PayloadError

#: Task fields in table order; every SELECT of a task lists exactly these.
TASK_COLUMNS: tuple[str, ...] = tuple(TASK_FIELDS)
SELECT_TASK = ", ".join(TASK_COLUMNS)

#: The statuses a row may hold: the CHECK constraint of both schemas lists exactly these.
STATUS_VALUES: tuple[str, ...] = tuple(s.value for s in TaskStatus)

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --\s*$")
_MIGRATION = re.compile(r"^(?P<dialect>[a-z]+)_(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


class StoreSQLError(TaskfuseError):
    """A packaged SQL file is malformed (a bug in the package, not in the caller)."""


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The named queries of a dialect, parsed once per process."""
    text = resources.files(__package__).joinpath(f"{dialect}_queries.sql").read_text("utf-8")
    queries: dict[str, str] = {}
    name: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            if name is not None:
                queries[name] = _clean(body)
            name, body = match.group(1), []
            if name in queries:
                raise StoreSQLError(f"query {name!r} defined twice in {dialect}_queries.sql")
        elif name is not None:
            body.append(line)
    if name is not None:
        queries[name] = _clean(body)
    return queries


def _clean(lines: list[str]) -> str:
    """Drop comment-only lines (the docstring) and blank lines; keep the statement."""
    kept = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("--")]
    return "\n".join(kept).strip().rstrip(";")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The numbered schema migrations of a dialect, in order; versions must be 1, 2, 3, ..."""
    found = []
    for entry in resources.files(__package__).iterdir():
        match = _MIGRATION.match(entry.name)
        if match and match.group("dialect") == dialect:
            version, name = int(match.group("version")), match.group("name")
            found.append(Migration(version, name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise StoreSQLError(f"{dialect} migrations are not numbered 1..n: {found!r}")
    return tuple(found)


def dumps(value: Any, task_id: str, what: str) -> str | None:
    """JSON text of a payload or result; None stays SQL NULL.

    Raises `PayloadError` naming the task, before anything is written, for values JSON cannot
    hold (objects, sets, NaN/inf). Tuples become lists and non-string keys strings: that is
    JSON's own model, and what a reader in another process can rebuild.
    """
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except RecursionError:  # JSON nested thousands deep: a value, not a bug of ours
        raise PayloadError(task_id, what, ValueError("nested too deep")) from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(task_id, what, exc) from None


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def names(values: tuple[str, ...]) -> str:
    """A tuple of names as JSON text (SQLite's representation of depends_on / downstreams)."""
    return json.dumps(list(values)) if values else "[]"


def unnames(text: str) -> tuple[str, ...]:
    return () if text == "[]" else tuple(json.loads(text))


def encode_status(task: Task) -> str:
    return task.status.value


STATUS_OF: dict[str, TaskStatus] = {s.value: s for s in TaskStatus}
VALUE_OF: dict[TaskStatus, str] = {s: s.value for s in TaskStatus}  # .value is a slow descriptor
_NO_COUNTS: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)


def counts_by_batch(rows: Any) -> dict[str, dict[TaskStatus, int]]:
    """The `batch_counts` query's rows (batch_id, status or NULL, n) as every batch's counts
    by status, in the rows' order (both dialects answer this shape). Per batch a copy of
    one zeroed dict and a table lookup per row: building each from the enum cost 3 ms a
    poll at 1,000 batches."""
    out: dict[str, dict[TaskStatus, int]] = {}
    for batch_id, status, n in rows:
        per = out.get(batch_id)
        if per is None:
            per = out[batch_id] = _NO_COUNTS.copy()
        if status is not None:
            per[STATUS_OF[status]] = int(n)
    return out


def swap_values(new: Task, expected: int) -> dict[str, Any]:
    """The columns a compare-and-set writes, shared by both dialects' `swap` queries;
    serializes the result first, so an unserializable one fails (PayloadError) unwritten."""
    return {
        "task_id": new.task_id,
        "expected": expected,
        "status": VALUE_OF[new.status],
        "version": new.version,
        "retry_count": new.retry_count,
        "not_before": new.not_before,
        "started_at": new.started_at,
        "finished_at": new.finished_at,
        "worker_id": new.worker_id,
        "result": dumps(new.result, new.task_id, "result"),
        "error_kind": new.error_kind,
        "error_msg": new.error_msg,
        "heartbeat_at": new.heartbeat_at,
        "last_delay": new.last_delay,
        "pending_since": new.pending_since,
        "operator_retries": new.operator_retries,
        "operator_retried_at": new.operator_retried_at,
    }


#: At most this many tasks answer one search (the fleet view shows "200+" past it).
SEARCH_LIMIT = 200


def like_pattern(text: str) -> str:
    """`text` as a LIKE pattern that matches it anywhere, its own `%`, `_` and `\\`
    escaped (the queries say ESCAPE '\\'): `50%_off` finds only that text."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class NamedQueryReads:
    """The Store protocol's reads that are one named query each, shared by both dialects.

    A store provides `_tasks(name, params)` (rows as Task records) and `_scalar(name,
    params)` (the first column of the first row); the query text lives in its .sql file.
    """

    def _tasks(self, name: str, params: dict[str, Any] | None = None) -> list[Task]:
        raise NotImplementedError

    def _scalar(self, name: str, params: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError

    def find(self, id_or_trace: str) -> list[Task]:
        return self._tasks("find_tasks", {"key": id_or_trace})

    def overdue(self, now: float) -> list[Task]:
        return self._tasks("overdue", {"now": now})

    def next_deadline(self) -> float | None:
        return self._scalar("next_deadline")  # type: ignore[no-any-return]

    def stale_running(self, now: float, lease_s: float | None) -> list[Task]:
        return self._tasks("stale_running", {"now": now, "lease": lease_s})

    def running_over_limit(self) -> list[Task]:
        return self._tasks("running_over_limit")

    def waiting_since_before(self, cutoff: float) -> list[Task]:
        return self._tasks("waiting_since_before", {"cutoff": cutoff})

    def next_ready_at(self, now: float) -> float | None:
        return self._scalar("next_ready_at", {"now": now})  # type: ignore[no-any-return]

    def dependents(self, task_id: str) -> list[Task]:
        return self._tasks("dependents", {"task_id": task_id})

    def running(self) -> list[Task]:
        return self._tasks("running")

    def all_tasks(self) -> list[Task]:
        return self._tasks("all_tasks")

    def __len__(self) -> int:
        return int(self._scalar("task_count"))

    # -- read-only questions of the fleet view (lab watch --store) ----------------------------

    def workers(self) -> list[WorkerBeat]:
        """Every worker's last beat (`Store.beat_worker`), the latest first."""
        value = self._scalar("workers")
        rows = json.loads(value) if isinstance(value, str) else value or []
        return [beat_of(row) for row in rows]

    def search(self, text: str, limit: int = SEARCH_LIMIT) -> list[Task]:
        """Tasks whose id, trace, kind, batch or idempotency key contains `text` (ASCII case
        folded), newest first, at most `limit` (1..SEARCH_LIMIT): the fleet view's `/`, so a
        part of an id finds its task. A scan, bounded in rows, never an index lookup."""
        limit = max(1, min(int(limit), SEARCH_LIMIT))
        return self._tasks("search_tasks", {"pattern": like_pattern(text), "limit": limit})

    def batch_p99(self, batch_id: str) -> float | None:
        """Nearest-rank p99 of the last-attempt durations of a batch's ended tasks."""
        n = int(self._scalar("batch_timed_count", {"batch_id": batch_id}))
        if not n:
            return None
        k = p99_offset(n)
        return float(self._scalar("batch_duration_desc", {"batch_id": batch_id, "k": k}))


def split_statements(script: str, complete: Any) -> list[str]:
    """Split a script into statements with `complete(text) -> bool` (sqlite3.complete_statement)."""
    out: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if complete(text):
            out.append(text)
            buf = []
    if any(ln.strip() and not ln.lstrip().startswith("--") for ln in buf):
        raise StoreSQLError(f"unterminated statement in migration: {' '.join(buf)[:80]!r}")
    return out


def p99_offset(n: int) -> int:
    """How many durations are longer than the nearest-rank p99 of n (rank ceil(0.99 n))."""
    return n - (99 * n + 99) // 100


#: The transition table's CANCEL rule, for the stores' one-statement batch cancel: the
#: statuses a cancel moves from, and where to (one target, checked here once).
CANCEL_FROM = tuple(s for s in TaskStatus if (s, TaskEvent.CANCEL) in TRANSITIONS)
(CANCEL_TO,) = {TRANSITIONS[s, TaskEvent.CANCEL] for s in CANCEL_FROM}
