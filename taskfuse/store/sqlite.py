"""SQLiteStore: the embedded default for real runs: one file, many threads and processes.

Theory of operation
-------------------
* The database is in WAL mode, so readers never block the writer and the writer never blocks
  readers; writers queue on SQLite's one write lock through ``busy_timeout``.
* Every write is one short ``BEGIN IMMEDIATE`` transaction: it takes the write lock up front,
  so two writers can never deadlock upgrading a read lock. A claim is one such transaction
  that reads ready rows in claim order and moves them (limit > 1 claims a batch at once).
* Every status change is `task.move` (the transition table) plus the compare-and-set
  ``UPDATE ... WHERE task_id = ? AND version = ?``; zero rows is a lost race: False.
* Claim order and every tie in it match MemoryStore exactly (priority, ready time, then a
  monotonic tick of when the row became claimable), so the same operations give the same
  states on both; the differential tests hold the two to that.
* Each thread uses its own connection (created on first use, also after a fork), so the
  store is safe to share between threads: unlike MemoryStore, no outside lock is needed.
* ``synchronous=FULL`` by default: a completion the store reported survives a power cut.
  ``?synchronous=NORMAL`` in the URL trades that for speed: still safe against a crashed
  or killed process, not against the machine losing power. `swap_many` commits many
  completions in one transaction and keeps both the version check and FULL durability.

* Each connection keeps a page cache of ``cache_mb`` (64 by default, filled only as pages
  are read). SQLite's own default, 2 MB, holds the inner pages of the table and its indexes
  at 20k rows but not at 1M: there a drain cost 9-23 % more per task, read back from the OS
  on every move; with 16 or 64 MB the cost stayed within 5 % (benchmarks/
  test_bench_throughput.py::test_runner_vs_table_size).

URL: ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (the usual SQLite URL
convention), with optional ``?synchronous=NORMAL&busy_timeout=30&cache_mb=64``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from taskfuse.core.dag import missing_dependency
from taskfuse.core.states import TERMINAL, TaskEvent, TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from taskfuse.core.task import Batch, Task, move
from taskfuse.store.failures import StoreError, StoreFull, StoreUnavailable, StoreURLError
from taskfuse.store.redaction import redact_url
from taskfuse.store.sql import (
    CANCEL_FROM,
    CANCEL_TO,
    SELECT_TASK,
    STATUS_OF,
    TASK_COLUMNS,
    VALUE_OF,
    NamedQueryReads,
    counts_by_batch,
    dumps,
    load_queries,
    loads,
    migrations,
    names,
    split_statements,
    swap_values,
    unnames,
)

_PENDING = TaskStatus.PENDING
_RUNNING = TaskStatus.RUNNING
_SUCCESS = TaskStatus.SUCCESS
_STATUS = STATUS_OF
_VALUE = VALUE_OF
_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
#: The migration from which the file keeps its counts by status (sqlite_0004_task_counts).
_KEPT_COUNTS = 4
#: How often a waiter of results (`wait_for_done`) reads data_version: a read of shared
#: memory, so often enough that a batch's end is seen 10 ms after its commit at most.
DONE_POLL_S = 0.01
#: The longest close() waits for threads in wait_for_work to leave (each polls every poll_s).
CLOSE_WAIT_S = 5.0
_KEPT_BATCH_COUNTS = 5
#: The largest page cache a connection may ask for (a typo of a few zeros must not reach
#: SQLite as a size it tries to honour).
_MAX_CACHE_MB = 65_536


def _queries() -> dict[str, str]:
    task_t = ", ".join(f"t.{c}" for c in SELECT_TASK.split(", "))
    return {
        name: sql.replace("{task_t}", task_t).replace("{task}", SELECT_TASK)
        for name, sql in load_queries("sqlite").items()
    }


Q = _queries()

#: The columns of an inserted row, in the order of `insert_tasks`.
_INSERT_COLUMNS = (*TASK_COLUMNS, "unmet", "ready_tick")
#: Rows per statement at most, for inserts and groups of completions (29 and 17 placeholders
#: a row, under the 32,766 of SQLite 3.32 and later; an older library allows 999: fewer rows
#: per statement then).
_MAX_ROWS_PER_STATEMENT = 500
#: The values of a move in `swap_ended`, in the order of its columns.
_ENDED_COLUMNS = ("task_id", "expected", "status", "version", "retry_count", "not_before",
                  "started_at", "finished_at", "worker_id", "result", "error_kind", "error_msg",
                  "heartbeat_at", "last_delay", "pending_since", "operator_retries",
                  "operator_retried_at")


@lru_cache(maxsize=16)
def _repeated(query: str, columns: int, rows: int) -> str:
    """A query whose {values} is `rows` groups of `columns` positional placeholders (a full
    group's text is built once)."""
    one = "(" + ", ".join("?" * columns) + ")"
    return Q[query].replace("{values}", ", ".join([one] * rows))


def _execute_grouped(conn: sqlite3.Connection, query: str, columns: Sequence[str],
                     rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Run `query` (its {values} repeated) over `rows`, as many per statement as this SQLite
    library's placeholders allow; the rows the statements answer, in order."""
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    per = max(1, min(_MAX_ROWS_PER_STATEMENT, limit // len(columns)))
    out: list[tuple[Any, ...]] = []
    for at in range(0, len(rows), per):
        group = rows[at:at + per]
        out += conn.execute(_repeated(query, len(columns), len(group)),
                            [row[column] for row in group for column in columns])
    return out


def _row_to_task(row: tuple[Any, ...]) -> Task:
    """A `tasks` row (columns in Task field order) as a Task record."""
    (task_id, kind, payload, batch_id, trace_id, key, depends_on, priority, status, version,
     retry_count, max_retry, timeout, not_before, created_at, started_at, finished_at,
     worker_id, result, error_kind, error_msg, downstreams, heartbeat_at, last_delay,
     pending_since, operator_retries, operator_retried_at) = row
    return Task(
        task_id, kind, loads(payload), batch_id, trace_id, key, unnames(depends_on), priority,
        _STATUS[status], version, retry_count, max_retry, timeout, not_before, created_at,
        started_at, finished_at, worker_id, loads(result), error_kind, error_msg,
        unnames(downstreams), heartbeat_at, last_delay, pending_since,
        operator_retries, operator_retried_at,
    )


def _swap_params(new: Task, expected: int) -> dict[str, Any]:
    """Parameters of the compare-and-set (the shared columns and SQLite's own)."""
    return {
        **swap_values(new, expected),
        "ready_tick": None,
        "run_tick": None,
        "claim_token": None,
    }


def _check_unique(ids: list[str]) -> None:
    seen: set[str] = set()
    for task_id in ids:
        if task_id in seen:
            raise StoreError(f"task_id {task_id!r} appears twice in one insert")
        seen.add(task_id)


#: SQLite's answers when a write needs room the file cannot get: the disk or a page limit
#: (SQLITE_FULL), or a file size limit, which the OS refuses as EFBIG (SQLITE_IOERR_WRITE).
_FULL_CODES = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_WRITE})


def _cannot_grow(exc: BaseException) -> bool:
    return (isinstance(exc, sqlite3.Error)
            and getattr(exc, "sqlite_errorcode", None) in _FULL_CODES)


class SQLiteStore(NamedQueryReads):
    """Tasks in one SQLite file; see the module docstring for the rules it keeps."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_s: float = 30.0,
        poll_s: float = 0.05,
        read_only: bool = False,
        cache_mb: float = 64.0,
    ) -> None:
        sync = synchronous.upper()
        if sync not in _SYNC_MODES:
            raise StoreURLError(f"synchronous must be one of {_SYNC_MODES}, got {synchronous!r}")
        if busy_timeout_s <= 0:
            raise StoreURLError(f"busy_timeout must be > 0 seconds, got {busy_timeout_s!r}")
        if not 0 < cache_mb <= _MAX_CACHE_MB:
            raise StoreURLError(
                f"cache_mb must be > 0 and <= {_MAX_CACHE_MB} megabytes, got {cache_mb!r}")
        self.cache_mb = cache_mb
        self.path = str(path)
        self.synchronous = sync
        self.busy_timeout_s = busy_timeout_s
        self.poll_s = poll_s
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._work = threading.Condition()
        self._work_gen = 0
        self._waiters = 0  # threads inside wait_for_work (under _work)
        #: A watcher's store: connections open the file read-only and nothing is created.
        self.read_only = read_only
        if read_only:
            self._check_schema()
        else:
            self._migrate()
        #: Counts by status kept in a table (migration 4), by batch too (migration 5); a
        #: watcher of an older file counts.
        version = self.schema_version()
        self._kept_counts = version >= _KEPT_COUNTS
        self._kept_batch_counts = version >= _KEPT_BATCH_COUNTS

    @classmethod
    def from_url(cls, url: str, read_only: bool = False) -> SQLiteStore:
        """``sqlite:///relative.db`` or ``sqlite:////abs/path.db``; options as query string."""
        parts = urlsplit(url)
        if parts.scheme != "sqlite" or parts.netloc or not parts.path.strip("/"):
            raise StoreURLError(
                f"expected sqlite:///PATH (sqlite:////abs/path for an absolute path), "
                f"got {redact_url(url)!r}"
            )
        options = dict(parse_qsl(parts.query))
        kwargs: dict[str, Any] = {}
        try:
            if "synchronous" in options:
                kwargs["synchronous"] = options.pop("synchronous")
            if "busy_timeout" in options:
                kwargs["busy_timeout_s"] = float(options.pop("busy_timeout"))
            if "cache_mb" in options:
                kwargs["cache_mb"] = float(options.pop("cache_mb"))
        except ValueError as exc:
            raise StoreURLError(f"bad option in {redact_url(url)!r}: {exc}") from None
        if options:
            raise StoreURLError(f"unknown option(s) {sorted(options)!r} in {redact_url(url)!r}")
        return cls(parts.path[1:], read_only=read_only, **kwargs)

    # -- connections -----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"SQLiteStore({self.path!r}) is closed")
        try:
            if self.read_only:
                return self._connect_read_only()
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute(f"PRAGMA cache_size=-{int(self.cache_mb * 1024)}")
            conn.execute("PRAGMA temp_store=MEMORY")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path!r}: {exc}") from None
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"SQLiteStore({self.path!r}) is closed")
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or local.pid != os.getpid():
            conn = local.conn = self._connect()
            local.pid = os.getpid()
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction holding the write lock from its first statement."""
        conn = self._conn()
        with self._write_lock:  # threads of this process queue here, not in SQLite's sleeps
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreUnavailable(
                    f"SQLite store {self.path!r} stayed locked for {self.busy_timeout_s:g}s: "
                    f"{exc}"
                ) from None
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:  # SQLite may have rolled back already (e.g. disk full)
                    conn.execute("ROLLBACK")
                if _cannot_grow(exc):
                    raise StoreFull(f"SQLite store {self.path!r} cannot grow ({exc}): free "
                                    "disk space or raise the file size limit") from None
                raise

    def _tick(self, conn: sqlite3.Connection, n: int = 1) -> int:
        """Reserve n ticks; answers the first of them."""
        (last,) = conn.execute(Q["next_tick"], {"n": n}).fetchone()
        return int(last) - n + 1

    def _migrate(self) -> None:
        """Create or upgrade the schema: apply each numbered migration the file lacks."""
        folder = Path(self.path).parent
        if self.path != ":memory:" and not folder.is_dir():  # never create directories
            raise StoreURLError(f"SQLite store {self.path!r}: no directory {str(folder)!r} "
                                "(the store creates its file, not directories)")
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS taskfuse_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {v for (v,) in conn.execute("SELECT version FROM taskfuse_migrations")}
            for mig in migrations("sqlite"):
                if mig.version in done:
                    continue
                for statement in split_statements(mig.sql, sqlite3.complete_statement):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO taskfuse_migrations VALUES (?, ?, ?)",
                    (mig.version, mig.name, time.time()),
                )

    def schema_version(self) -> int:
        """The highest migration applied to this file."""
        (v,) = self._conn().execute("SELECT max(version) FROM taskfuse_migrations").fetchone()
        return int(v or 0)

    def close(self) -> None:
        """Close every connection this store opened (in all threads); the store is unusable.

        A thread waiting for work (a runner's listener) polls its own connection: it is woken
        and left to return first (bounded by CLOSE_WAIT_S), since closing a connection while
        another thread runs a statement on it crashes the interpreter, not raises. (It did
        once, in a test suite: a listener's poll met the test's close of the store.)
        """
        with self._work:
            self._closed = True
            self._work_gen += 1
            self._work.notify_all()
            self._work.wait_for(lambda: self._waiters == 0, CLOSE_WAIT_S)
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        """Insert all or nothing; (existing, False) for a task whose idempotency_key exists.

        Payloads are serialized before the transaction starts, so a bad one writes nothing.
        """
        encoded = [dumps(t.payload, t.task_id, "payload") for t in tasks]
        if not tasks:
            return []
        with self._write() as conn:
            out, fresh = self._dedupe(conn, tasks)
            if not fresh:
                return out
            self._check_ids(conn, [t for t, _ in fresh])
            parents = {dep for t, _ in fresh for dep in t.depends_on}
            status_of: dict[str, str] = {}
            if parents:
                rows = conn.execute(Q["statuses_of"], {"ids": names(tuple(parents))})
                status_of.update(rows.fetchall())
                problem = missing_dependency([(t.task_id, t.depends_on) for t, _ in fresh],
                                             status_of.__contains__)
                if problem is not None:  # the write transaction rolls back: nothing written
                    raise problem
            first = self._tick(conn, len(fresh))
            rows = []
            deps = []
            for i, (task, index) in enumerate(fresh):
                unmet = 0
                for pos, dep in enumerate(task.depends_on):
                    if status_of.get(dep) != "SUCCESS":
                        unmet += 1
                    deps.append({"task_id": task.task_id, "pos": pos, "depends_on": dep})
                status_of[task.task_id] = _VALUE[task.status]
                rows.append(self._insert_params(task, encoded[index], unmet, first + i))
            _execute_grouped(conn, "insert_tasks", _INSERT_COLUMNS, rows)
            if deps:
                conn.executemany(Q["insert_dep"], deps)
        self._notify_local()
        return out

    def _dedupe(
        self, conn: sqlite3.Connection, tasks: Sequence[Task]
    ) -> tuple[list[tuple[Task, bool]], list[tuple[Task, int]]]:
        """Split into answers and the (task, index) pairs to write, MemoryStore's way."""
        keys = [t.idempotency_key for t in tasks if t.idempotency_key]
        owners: dict[str, Task] = {}
        if keys:
            for row in conn.execute(Q["tasks_by_key"], {"keys": names(tuple(keys))}):
                task = _row_to_task(row)
                owners[task.idempotency_key or ""] = task
        out: list[tuple[Task, bool]] = []
        fresh: list[tuple[Task, int]] = []
        for index, task in enumerate(tasks):
            key = task.idempotency_key
            if key and key in owners:
                out.append((owners[key], False))
                continue
            if key:
                owners[key] = task
            fresh.append((task, index))
            out.append((task, True))
        return out, fresh

    def _check_ids(self, conn: sqlite3.Connection, fresh: list[Task]) -> None:
        ids = [t.task_id for t in fresh]
        _check_unique(ids)
        clash = conn.execute(Q["existing_ids"], {"ids": names(tuple(ids))}).fetchone()
        if clash:
            raise StoreError(f"task_id {clash[0]!r} already exists")

    @staticmethod
    def _insert_params(task: Task, payload: str | None, unmet: int, tick: int) -> dict[str, Any]:
        return {
            "task_id": task.task_id, "kind": task.kind, "payload": payload,
            "batch_id": task.batch_id, "trace_id": task.trace_id,
            "idempotency_key": task.idempotency_key, "depends_on": names(task.depends_on),
            "priority": task.priority, "status": _VALUE[task.status], "version": task.version,
            "retry_count": task.retry_count, "max_retry": task.max_retry,
            "timeout": task.timeout, "not_before": task.not_before,
            "created_at": task.created_at, "started_at": task.started_at,
            "finished_at": task.finished_at, "worker_id": task.worker_id,
            "result": dumps(task.result, task.task_id, "result"),
            "error_kind": task.error_kind, "error_msg": task.error_msg,
            "downstreams": names(task.downstreams), "heartbeat_at": task.heartbeat_at,
            "last_delay": task.last_delay, "pending_since": task.pending_since,
            "operator_retries": task.operator_retries,
            "operator_retried_at": task.operator_retried_at,
            "unmet": unmet, "ready_tick": tick,
        }

    def swap(self, new: Task, expected_version: int) -> bool:
        """Compare-and-set one record; False (nothing written) if its version moved on."""
        params = _swap_params(new, expected_version)
        with self._write() as conn:
            won = self._swap_in(conn, new, params)
        if won and new.status is _PENDING:
            self._notify_local()
        return won

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        """Several compare-and-sets in one transaction (one commit, one fsync).

        Each move is checked on its own: a lost race answers False for that move only. This is
        how a worker reports a group of completions without paying a commit for each.
        """
        params = [_swap_params(new, expected) for new, expected in moves]
        if not moves:
            return []
        succeeded = [new.task_id for new, _ in moves if new.status is _SUCCESS]
        with self._write() as conn:
            parents: set[str] | None = None
            if succeeded:  # one look-up for the group instead of one per completion
                rows = conn.execute(Q["parents_among"], {"ids": names(tuple(succeeded))})
                parents = {r[0] for r in rows}
            ended = self._swap_ended(conn, moves, params)
            won = []
            for i, ((new, _), p) in enumerate(zip(moves, params, strict=True)):
                if i not in ended:
                    won.append(self._swap_in(conn, new, p, parents))
                    continue
                won.append(ended[i])
                if ended[i] and new.status is _SUCCESS and new.task_id in (parents or ()):
                    conn.execute(Q["release_children"],
                                 {"parent": new.task_id, "tick": self._tick(conn)})
        if any(w and new.status is _PENDING for w, (new, _) in zip(won, moves, strict=True)):
            self._notify_local()
        return won

    def _swap_ended(
        self, conn: sqlite3.Connection, moves: Sequence[tuple[Task, int]],
        params: list[dict[str, Any]],
    ) -> dict[int, bool]:
        """Apply the group's moves to an ended status in one statement (`swap_ended`): by
        index of the move, whether it won. They take no tick, so the moves left for
        `_swap_in`, and the children a success releases (in move order, by the caller),
        reserve the same ticks in the same order as one statement per move did. A group
        that moves one task twice is left whole to `_swap_in`, whose order decides."""
        ids = [new.task_id for new, _ in moves]
        picked = [i for i, (new, _) in enumerate(moves) if new.status in TERMINAL]
        if len(picked) < 2 or len(set(ids)) != len(ids):
            return {}
        answered = _execute_grouped(conn, "swap_ended", _ENDED_COLUMNS,
                                    [params[i] for i in picked])
        won = {r[0] for r in answered}
        return {i: ids[i] in won for i in picked}

    def _swap_in(
        self,
        conn: sqlite3.Connection,
        new: Task,
        params: dict[str, Any],
        parents: set[str] | None = None,
    ) -> bool:
        """The compare-and-set inside a write transaction. `parents`, when given, is the
        set of tasks known to have dependents (so no per-task look-up is needed)."""
        if new.status is _PENDING:
            params["ready_tick"] = self._tick(conn)
        elif new.status is _RUNNING and params["run_tick"] is None:
            params["run_tick"] = self._tick(conn)
        if conn.execute(Q["swap"], params).rowcount != 1:
            return False
        if new.status is _SUCCESS:
            if parents is None:
                found = conn.execute(Q["has_children"], {"parent": new.task_id}).fetchone()
                if found is None:
                    return True
            elif new.task_id not in parents:
                return True
            conn.execute(Q["release_children"], {"parent": new.task_id, "tick": self._tick(conn)})
        return True

    def heartbeat(self, task_id: str, version: int, now: float) -> bool:
        """Renew the lease of the attempt at `version` (heartbeat_at, no new version); False
        when that attempt is not the task's current one."""
        conn = self._conn()
        with self._write_lock:  # a write: queue with this process's other writers
            cur = conn.execute(
                Q["heartbeat"], {"task_id": task_id, "version": version, "now": now}
            )
        return cur.rowcount == 1

    def heartbeat_many(self, attempts: Sequence[tuple[str, int]], now: float) -> list[bool]:
        """Renew many attempts' leases in one write (one commit)."""
        if not attempts:
            return []
        rows = json.dumps([[task_id, version] for task_id, version in attempts])
        with self._write() as conn:
            renewed = {(r[0], r[1]) for r in conn.execute(Q["heartbeat_many"],
                                                           {"rows": rows, "now": now})}
        return [tuple(a) in renewed for a in attempts]

    def beat_worker(self, beat: WorkerBeat) -> None:
        with self._write() as conn:
            conn.execute(Q["beat_worker"], {"worker_id": beat.worker_id,
                                            "beat": json.dumps(beat._asdict()),
                                            "beat_at": beat.beat_at})

    def has_unfinished(self, batch_id: str | None = None) -> bool:
        if batch_id is None:
            return bool(self._scalar("has_unfinished"))
        return bool(self._scalar("has_unfinished_batch", {"batch_id": batch_id}))

    def put_batch(self, batch: Batch) -> Batch:
        meta = dumps(dict(batch.meta), batch.batch_id, "batch meta") or "{}"
        with self._write() as conn:
            conn.execute(Q["put_batch"], {
                "batch_id": batch.batch_id, "cap": batch.cap, "created_at": batch.created_at,
                "meta": meta, "seq": self._tick(conn),
            })
        found = self.get_batch(batch.batch_id)
        assert found is not None
        return found

    def prune(self, cutoff: float, statuses: Sequence[TaskStatus], batch_id: str | None,
              limit: int) -> dict[TaskStatus, int]:
        """Delete up to `limit` ended tasks (retention, `taskfuse.runtime.retention`) in one
        short write transaction; answers how many of each status went.

        A batch the deleted tasks belong to gets a record (no cap, created when its first
        pruned task was) if it had none: a batch submitted without one (`submit_many` with a
        batch id) was known only by its tasks, and pruned whole it became an unknown id to
        `wait` and `status` instead of EMPTY, as a recorded batch reads."""
        params = {"statuses": names(tuple(_VALUE[s] for s in statuses)), "cutoff": cutoff,
                  "batch": batch_id, "n": limit}
        gone: dict[TaskStatus, int] = {}
        with self._write() as conn:
            picked = conn.execute(Q["prune_pick"], params).fetchall()
            if not picked:
                return gone
            seqs = json.dumps([seq for seq, _ in picked])
            batches: dict[str, float] = {}
            for status, batch_id, created_at in conn.execute(Q["prune_rows"],
                                                             {"seqs": seqs}).fetchall():
                gone[_STATUS[status]] = gone.get(_STATUS[status], 0) + 1
                if batch_id is not None:
                    batches[batch_id] = min(created_at, batches.get(batch_id, created_at))
            conn.execute(Q["prune_deps"], {"ids": json.dumps([tid for _, tid in picked])})
            for batch_id, created_at in batches.items():
                conn.execute(Q["put_batch"], {"batch_id": batch_id, "cap": None,
                                              "created_at": created_at, "meta": "{}",
                                              "seq": self._tick(conn)})
        return gone

    def prunable(self, cutoff: float, statuses: Sequence[TaskStatus],
                 batch_id: str | None) -> dict[TaskStatus, int]:
        """What `prune` would delete in all, by status (a dry run)."""
        params = {"statuses": names(tuple(_VALUE[s] for s in statuses)), "cutoff": cutoff,
                  "batch": batch_id}
        return {_STATUS[s]: n for s, n in self._conn().execute(Q["prune_count"], params)}

    # -- claiming --------------------------------------------------------------------------

    def claim(
        self, worker_id: str, now: float, limit: int, blocked: frozenset[str] = frozenset(),
        exclude: frozenset[str] = frozenset(),
    ) -> list[Task]:
        """Move up to `limit` ready tasks to RUNNING for `worker_id` in one transaction."""
        if limit < 1:
            return []
        token = uuid.uuid4().hex
        blocked_json = names(tuple(sorted(blocked)))
        exclude_json = names(tuple(sorted(exclude)))
        claimed: list[Task] = []
        with self._write() as conn:
            while len(claimed) < limit:
                want = limit - len(claimed)
                rows = conn.execute(
                    Q["claim_candidates"],
                    {"now": now, "blocked": blocked_json, "n": want, "exclude": exclude_json},
                ).fetchall()
                if not rows:
                    break
                picked = self._within_caps(conn, [_row_to_task(r) for r in rows])
                if picked:
                    moved = [move(t, TaskEvent.CLAIM, now, worker_id=worker_id) for t in picked]
                    self._write_claims(conn, picked, moved, token)
                    claimed += moved
                if len(rows) < want:
                    break
        return claimed

    def _write_claims(
        self, conn: sqlite3.Connection, old: list[Task], new: list[Task], token: str
    ) -> None:
        """Write claimed records: one set-based compare-and-set when they differ only in
        version (what `move` builds for a claim), else one swap per record."""
        tick = self._tick(conn, len(new))
        first = new[0]
        shape = (first.status, first.started_at, first.heartbeat_at, first.worker_id)
        uniform = first.started_at == first.heartbeat_at and all(
            (n.status, n.started_at, n.heartbeat_at, n.worker_id) == shape
            and n.finished_at is None
            and (n.retry_count, n.not_before, n.result, n.error_kind, n.error_msg,
                 n.last_delay) == (o.retry_count, o.not_before, o.result, o.error_kind,
                                   o.error_msg, o.last_delay)
            for o, n in zip(old, new, strict=True)
        )
        if uniform:
            rows = json.dumps([[o.task_id, o.version, n.version]
                               for o, n in zip(old, new, strict=True)])
            written = conn.execute(Q["claim_rows"], {
                "rows": rows, "now": first.started_at, "worker_id": first.worker_id,
                "tick": tick, "token": token,
            }).rowcount
        else:  # only if `move` ever sets more on a claim: one compare-and-set per record
            updates = []
            for i, (o, n) in enumerate(zip(old, new, strict=True)):
                params = _swap_params(n, o.version)
                params["run_tick"] = tick + i
                params["claim_token"] = token
                updates.append(params)
            written = conn.executemany(Q["swap"], updates).rowcount
        if written != len(old):
            raise StoreError("a claimed row changed inside the claim's own transaction")

    @staticmethod
    def _within_caps(conn: sqlite3.Connection, tasks: list[Task]) -> list[Task]:
        """Candidates in order, skipping those whose capped batch fills up on the way."""
        batch_ids = {t.batch_id for t in tasks if t.batch_id is not None}
        if not batch_ids:
            return tasks
        room = dict(conn.execute(Q["batch_room"], {"ids": names(tuple(batch_ids))}).fetchall())
        if not room:
            return tasks
        picked = []
        for task in tasks:
            left = room.get(task.batch_id)
            if left is not None:
                if left <= 0:
                    continue
                room[task.batch_id] = left - 1
            picked.append(task)
        return picked

    # -- waiting for work ------------------------------------------------------------------

    def _notify_local(self) -> None:
        with self._work:
            self._work_gen += 1
            self._work.notify_all()

    def wait_for_work(self, timeout: float) -> bool:
        """Block up to `timeout` s until work may have arrived; True if something changed.

        In this process a submit wakes waiters at once; another process's commit is seen by
        a short poll of ``PRAGMA data_version`` (every `poll_s`), which changes exactly when
        another connection committed. A True is a hint to claim, not a promise of a task.
        """
        return self._wait_commit(timeout, self.poll_s, None)

    def wait_for_done(self, timeout: float) -> bool:
        """Block up to `timeout` s until another connection committed (a task may have
        ended); SQLite has no notifications, so this polls ``PRAGMA data_version`` (a read
        of shared memory, no table is read) every DONE_POLL_S. Unlike `wait_for_work` it
        compares with the version this thread saw at its previous call, so a commit that
        landed while the caller was asking the store is not missed (the caller arms it with
        a call of timeout 0 before it first asks)."""
        return self._wait_commit(timeout, DONE_POLL_S, "done_version")

    def _wait_commit(self, timeout: float, poll_s: float, remember: str | None) -> bool:
        """Poll data_version every `poll_s` until it moves past the version this thread saw
        last (kept in the thread's `remember` slot; None: as it is now), a local submit
        wakes us, the store closes, or `timeout` passes."""
        with self._work:
            if self._closed:
                return False
            self._waiters += 1  # close() waits for us to leave before closing our connection
            gen = self._work_gen
        version = None
        try:
            conn = self._conn()
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            seen = getattr(self._local, remember, version) if remember else version
            deadline = time.monotonic() + max(0.0, timeout)
            while True:
                if version != seen:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                with self._work:
                    if self._work.wait_for(lambda: self._work_gen != gen, min(left, poll_s)):
                        return not self._closed
                version = conn.execute("PRAGMA data_version").fetchone()[0]
        finally:
            if remember and version is not None:
                setattr(self._local, remember, version)
            with self._work:
                self._waiters -= 1
                self._work.notify_all()

    # -- reading ---------------------------------------------------------------------------

    def _tasks(self, name: str, params: dict[str, Any] | None = None) -> list[Task]:
        return [_row_to_task(r) for r in self._conn().execute(Q[name], params or {})]

    def _scalar(self, name: str, params: dict[str, Any] | None = None) -> Any:
        row = self._conn().execute(Q[name], params or {}).fetchone()
        return None if row is None else row[0]

    def get(self, task_id: str) -> Task | None:
        row = self._conn().execute(Q["get_task"], {"task_id": task_id}).fetchone()
        return None if row is None else _row_to_task(row)

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """By status, from the kept totals (a few rows), of the whole table or one batch."""
        out = dict.fromkeys(TaskStatus, 0)
        if batch_id is None:
            rows = self._conn().execute(Q["counts" if self._kept_counts else "counts_scan"])
        else:
            query = "counts_batch" if self._kept_batch_counts else "counts_batch_scan"
            rows = self._conn().execute(Q[query], {"batch_id": batch_id})
        for status, n in rows:
            out[_STATUS[status]] = n
        return out

    def get_batch(self, batch_id: str) -> Batch | None:
        row = self._conn().execute(Q["get_batch"], {"batch_id": batch_id}).fetchone()
        if row is None:
            return None
        return Batch(row[0], row[1], row[2], loads(row[3]))

    def batch_counts(self) -> dict[str, dict[TaskStatus, int]] | None:
        """Every batch (as `batch_ids` lists them) with its counts by status, from the kept
        counts in one query; None for a file from before them (a watcher never migrates),
        where it would read every row: ask `counts(batch)` of the batches that can move."""
        if not self._kept_batch_counts:
            return None
        return counts_by_batch(self._conn().execute(Q["batch_counts"]))

    def batch_ids(self) -> list[str]:
        query = "batch_ids" if self._kept_batch_counts else "batch_ids_scan"
        return [r[0] for r in self._conn().execute(Q[query])]

    def dependents_of(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks that depend on any of these, each once (one query)."""
        found = self._tasks("dependents_of", {"ids": json.dumps(list(task_ids))})
        return list({t.task_id: t for t in found}.values())

    def cancel_batch(self, batch_id: str, now: float, error_kind: str,
                     reason: str) -> list[tuple[TaskStatus, Task]]:
        """Every unfinished task of the batch through the table's CANCEL move: one write
        transaction, one UPDATE per source status (its RETURNING names the status left).
        Answers (the status it left, its new record)."""
        params = {"batch_id": batch_id, "now": now, "error_kind": error_kind,
                  "reason": reason, "dst": CANCEL_TO.value}
        with self._write() as conn:
            return [(src, _row_to_task(row)) for src in CANCEL_FROM
                    for row in conn.execute(Q["cancel_batch"], {**params, "src": src.value})
                    .fetchall()]

    def batch_tasks(
        self, batch_id: str, statuses: Iterable[TaskStatus] | None = None
    ) -> list[Task]:
        if statuses is None:
            return self._tasks("batch_tasks", {"batch_id": batch_id})
        wanted = names(tuple(TaskStatus(s).value for s in statuses))
        return self._tasks("batch_tasks_in", {"batch_id": batch_id, "statuses": wanted})


    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- read-only opening (lab watch --store: a watcher never creates or changes a store) -----

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that cannot write (``mode=ro``); raises sqlite3.Error."""
        uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        conn.execute(f"PRAGMA cache_size=-{int(self.cache_mb * 1024)}")
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _check_schema(self) -> None:
        """Refuse a file that holds no taskfuse store, instead of creating one in it."""
        try:
            self._conn().execute("SELECT max(version) FROM taskfuse_migrations").fetchone()
        except sqlite3.Error as exc:
            self.close()
            raise StoreUnavailable(
                f"SQLite file {self.path!r} holds no taskfuse store: {exc}") from None
