"""PostgresStore: many worker processes on many machines sharing one PostgreSQL database.

Theory of operation
-------------------
* A claim is one short transaction: ``SELECT ... ORDER BY priority DESC, ready_at, tick
  LIMIT n FOR UPDATE SKIP LOCKED`` over a partial index of claimable rows, then one
  compare-and-set per row. Rows another claimer holds are skipped, never waited for, so
  claimers do not queue behind each other. DAG readiness (a per-row count of unmet
  dependencies kept on every SUCCESS) and per-batch caps are conditions of that query; a
  capped batch's row is locked while its running tasks are counted, so the cap holds across
  processes.
* Every status change is `task.move` (the transition table) plus ``UPDATE ... WHERE task_id
  = %s AND version = %s``: zero rows is a lost race and answers False.
* What a claim costs: the rows it walks past in the index before it has `limit` ready ones,
  never the table's size (finished rows are not in the partial index; rows waiting on a
  dependency leave it until their last dependency succeeds). Rows it does walk past: those
  of a higher priority still held back by not_before, by a blocked downstream, or by a
  batch at its cap, and rows another claimer has locked.
* The store creates and versions its own schema: numbered migrations recorded in
  ``taskfuse_migrations``, applied under an advisory lock so many processes may start at once.
  Each store lives in its own PostgreSQL schema (``?schema=name``, default ``taskfuse``).
* Idle workers wait on `wait_for_work` instead of polling: inserts, moves back to PENDING,
  released dependents and freed batch slots ``NOTIFY`` a channel that one listening
  connection per process turns into wake-ups.
* A broken connection (database restart, failover, a killed backend) is retried with
  exponential backoff (capped at 1 s) for up to ``retry_for`` seconds, and the pool tries
  to reconnect at least every `_RECONNECT_MAX_S` however long the outage (`_pool`, with
  psycopg_pool's public options; its own schedule doubles from 1 s to 32 s and beyond, so
  work used to resume up to half an outage's length after the database answered again).
  How long the database has answered since (`answering_for`) tells the sweeper to give
  lapsed leases a lease's time to be renewed after an outage. A retry first
  asks whether the attempt it repeats already committed (a claim finds its rows by a
  token, a swap compares the stored record with the one it wrote, an insert finds its
  rows), so a restart neither loses a task nor runs one twice. After that,
  `StoreUnavailable`.
* Credentials never appear in logs or errors: the store names itself by `redact_url`.

URL: ``postgresql://user@host:5432/db?schema=taskfuse&pool_max=10&retry_for=60``; every
other query parameter goes to libpq unchanged.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from taskfuse.core.dag import missing_dependency
from taskfuse.core.states import TERMINAL, TaskEvent, TaskStatus
from taskfuse.core.storeapi import WorkerBeat
from taskfuse.core.task import Batch, Task, move
from taskfuse.store.classify import transient
from taskfuse.store.failures import StoreError, StoreUnavailable, StoreURLError, split_url
from taskfuse.store.redaction import describe_error, encode_userinfo, redact_url, remember
from taskfuse.store.sql import (
    CANCEL_FROM,
    CANCEL_TO,
    SELECT_TASK,
    STATUS_OF,
    VALUE_OF,
    NamedQueryReads,
    counts_by_batch,
    dumps,
    load_queries,
    migrations,
    swap_values,
)

log = logging.getLogger("taskfuse.store")

T = TypeVar("T")
Op = Callable[[psycopg.Connection[Any], bool], T]

_PENDING = TaskStatus.PENDING
_RUNNING = TaskStatus.RUNNING
_SUCCESS = TaskStatus.SUCCESS
_STATUS = STATUS_OF
_VALUE = VALUE_OF
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_OWN_PARAMS = ("schema", "pool_min", "pool_max", "retry_for")
#: How long the answer "does any batch have a cap?" is trusted (see `_any_capped`).
_CAPPED_TTL_S = 1.0
#: A submit of at least this many tasks asks whether the planner has seen them (one EXPLAIN):
#: smaller ones never pay for it, and autovacuum's analyze catches up with them in time.
_BULK_ROWS = 1000
#: The migration from which the schema keeps its counts by status (task_counts).
_KEPT_COUNTS = 5
_KEPT_BATCH_COUNTS = 6


#: Longest wait between the pool's attempts to reconnect (its `reconnect_timeout`).
_RECONNECT_MAX_S = 0.5


def _reconnect_again(pool: ConnectionPool) -> None:  # type: ignore[type-arg]
    """The pool's `reconnect_failed` callback: start the next attempt at once.

    psycopg_pool's own schedule waits 1 s, then 2, 4, ... up to `reconnect_timeout` (5 min),
    then gives the connection up; work used to resume up to half an outage's length after
    the database answered again. With `reconnect_timeout=_RECONNECT_MAX_S` an attempt gives
    up after that long, and this callback's `check()` (public API: it tests the idle
    connections and grows the pool back towards `min_size`) starts a fresh one, so the pool
    tries at least every `_RECONNECT_MAX_S` however long the outage. A closed pool is left
    alone."""
    if not pool.closed:
        pool.check()


class _QuietReconnects(logging.Filter):
    """psycopg_pool logs every failed reconnection, and ours come every 0.5 s per connection:
    of a taskfuse pool's, one line per `_RECONNECT_LOG_S` passes (the first at once)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg not in _RECONNECT_MESSAGES or not args:
            return True
        name = str(args[0])
        if not name.startswith("taskfuse:"):
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(name, -_RECONNECT_LOG_S) < _RECONNECT_LOG_S:
                return False
            self._last[name] = now
        return True


_RECONNECT_LOG_S = 10.0
#: psycopg_pool's lines about a failed connection attempt and an attempt given up.
_RECONNECT_MESSAGES = ("error connecting in %r: %s",
                       "reconnection attempt in pool %r failed after %s sec")
_QUIET_RECONNECTS = _QuietReconnects()


def _pool(conninfo: str, **kwargs: Any) -> ConnectionPool:  # type: ignore[type-arg]
    """A ConnectionPool that reconnects at least every `_RECONNECT_MAX_S` through its public
    options (`reconnect_timeout`, `reconnect_failed`: see `_reconnect_again`); its failed
    attempts are logged at most once per `_RECONNECT_LOG_S`."""
    logging.getLogger("psycopg.pool").addFilter(_QUIET_RECONNECTS)  # once: same object
    return ConnectionPool(conninfo, reconnect_timeout=_RECONNECT_MAX_S,
                          reconnect_failed=_reconnect_again, **kwargs)


def _claim_move() -> tuple[str, int]:
    """What a claim writes, from the transition table and `move` themselves: the target
    status of PENDING --claim--> and the version step, for the one-statement claim."""
    probe = Task("probe", "k")
    moved = move(probe, TaskEvent.CLAIM, 1.0, worker_id="w")
    return moved.status.value, moved.version - probe.version


_CLAIM_STATUS, _CLAIM_BUMP = _claim_move()


def _queries() -> dict[str, str]:
    task_t = ", ".join(f"t.{c}" for c in SELECT_TASK.split(", "))
    return {
        name: text.replace("{task_t}", task_t).replace("{task}", SELECT_TASK)
        for name, text in load_queries("postgres").items()
    }


Q = _queries()


def _row_to_task(row: Sequence[Any]) -> Task:
    """A `tasks` row (columns in Task field order) as a Task record."""
    (task_id, kind, payload, batch_id, trace_id, key, depends_on, priority, status, version,
     retry_count, max_retry, timeout, not_before, created_at, started_at, finished_at,
     worker_id, result, error_kind, error_msg, downstreams, heartbeat_at, last_delay,
     pending_since, operator_retries, operator_retried_at) = row
    return Task(
        task_id, kind, payload, batch_id, trace_id, key, tuple(depends_on), priority,
        _STATUS[status], version, retry_count, max_retry, timeout, not_before, created_at,
        started_at, finished_at, worker_id, result, error_kind, error_msg,
        tuple(downstreams), heartbeat_at, last_delay, pending_since,
        operator_retries, operator_retried_at,
    )


def _swap_params(new: Task, expected: int, claim_token: uuid.UUID | None = None) -> dict[str, Any]:
    """Parameters of the compare-and-set (the shared columns and the claim token)."""
    return {**swap_values(new, expected), "claim_token": claim_token}


def _same_write(stored: Task, new: Task) -> bool:
    """Whether `stored` is the record `new` a swap wrote (used after an unsure commit)."""
    return (
        stored.version == new.version
        and stored.status is new.status
        and stored.worker_id == new.worker_id
        and stored.started_at == new.started_at
        and stored.finished_at == new.finished_at
        and stored.retry_count == new.retry_count
        and stored.not_before == new.not_before
        and stored.error_kind == new.error_kind
    )


class _Listener:
    """One LISTENing connection per store, turning notifications into wake-ups for threads.

    Each channel has a generation counter; `wait` returns when it moves past the value the
    calling thread saw at its previous wait, so a notification that arrives while the thread
    is busy claiming is not lost. After a broken connection every channel is bumped once,
    since notifications sent meanwhile are gone.
    """

    def __init__(self, conninfo: str, describe: Callable[[BaseException], str]) -> None:
        self._conninfo = conninfo
        self._describe = describe
        self._cond = threading.Condition()
        self._gens: dict[str, int] = defaultdict(int)
        self._wanted: set[str] = set()
        self._subscribed: set[str] = set()
        self._seen = threading.local()
        self._stop = False
        self._thread: threading.Thread | None = None

    def subscribe(self, channel: str, timeout: float = 5.0) -> None:
        with self._cond:
            if channel in self._subscribed:
                return
            self._wanted.add(channel)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="taskfuse-listen", daemon=True
                )
                self._thread.start()
            self._cond.wait_for(lambda: channel in self._subscribed or self._stop, timeout)

    def wait(self, channel: str, timeout: float) -> bool:
        self.subscribe(channel)
        seen: dict[str, int] = self._seen.__dict__
        with self._cond:
            last = seen.get(channel, self._gens[channel])
            woke = self._cond.wait_for(
                lambda: self._gens[channel] != last or self._stop, max(0.0, timeout)
            )
            seen[channel] = self._gens[channel]
            return bool(woke) and not self._stop

    def _bump(self, channels: Iterable[str]) -> None:
        with self._cond:
            for channel in channels:
                self._gens[channel] += 1
            self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.05
        while not self._stop:
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    delay = 0.05
                    subscribed: set[str] = set()
                    while not self._stop:
                        with self._cond:
                            todo = self._wanted - subscribed
                        for channel in todo:
                            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                            subscribed.add(channel)
                        if todo:
                            with self._cond:
                                self._subscribed |= todo
                            self._bump(todo)
                        # each as it arrives: collecting the whole window first held
                        # every wake-up back by up to its 0.2 s
                        for note in conn.notifies(timeout=0.2):
                            self._bump((note.channel,))
            except psycopg.Error as exc:
                if self._stop:
                    break
                log.warning("listener connection lost (%s); reconnecting in %.2fs",
                            self._describe(exc), delay)
                with self._cond:
                    self._subscribed.clear()
                    wanted = set(self._wanted)
                self._bump(wanted)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


class PostgresStore(NamedQueryReads):
    """Tasks in a PostgreSQL schema; see the module docstring for the rules it keeps.

    Thread-safe: every operation borrows a pooled connection for one transaction.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_min: int | None = None,
        pool_max: int | None = None,
        retry_for: float | None = None,
        connect_timeout: float = 10.0,
        application_name: str | None = None,
        read_only: bool = False,
    ) -> None:
        url = encode_userinfo(url)  # an unencoded `/?#@` in a password stays in it
        parts = split_url(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise StoreURLError(f"expected postgresql://..., got {redact_url(url)!r}")
        remember(url)  # its secrets never reach an error or a log line
        self.url = redact_url(url)
        options = dict(parse_qsl(parts.query))
        own = {k: options.pop(k) for k in _OWN_PARAMS if k in options}
        try:
            self.schema = schema or own.get("schema", "taskfuse")
            pool_min = pool_min if pool_min is not None else int(own.get("pool_min", 1))
            pool_max = pool_max if pool_max is not None else int(own.get("pool_max", 10))
            self.retry_for = retry_for if retry_for is not None else float(
                own.get("retry_for", 60.0)
            )
        except ValueError as exc:
            raise StoreURLError(f"bad option in {self.url!r}: {exc}") from None
        if not _SCHEMA_RE.match(self.schema):
            raise StoreURLError(
                f"schema must be a lowercase identifier of at most 40 characters, "
                f"got {self.schema!r}"
            )
        if not 1 <= pool_min <= pool_max:
            raise StoreURLError(f"need 1 <= pool_min <= pool_max, got {pool_min}, {pool_max}")
        libpq_url = urlunsplit(parts._replace(query=urlencode(options, quote_via=quote)))
        try:
            given = conninfo_to_dict(libpq_url)
        except psycopg.ProgrammingError as exc:
            raise StoreURLError(f"bad PostgreSQL URL {self.url!r}: {self._scrub(exc)}") from None
        ports = [p for p in str(given.get("port") or "").split(",") if p]
        if not all(p.isascii() and p.isdigit() for p in ports):
            raise StoreURLError(f"bad PostgreSQL URL {self.url!r}: expected a port number, "
                                f"got {str(given['port'])!r}")
        extra_options = f"{given.get('options', '')} -c search_path={self.schema}".strip()
        if read_only:  # a watcher: the server itself refuses every write of this store
            extra_options += " -c default_transaction_read_only=on"
        self._conninfo = make_conninfo(
            libpq_url,
            options=extra_options,
            application_name=application_name or given.get("application_name")
            or f"taskfuse:{self.schema}",
            connect_timeout=given.get("connect_timeout") or max(1, int(connect_timeout)),
        )
        self.work_channel = f"taskfuse_work_{self.schema}"
        #: Notified when a task ends (migration 8), for waiters of results.
        self.done_channel = f"taskfuse_done_{self.schema}"
        self._closed = False
        self._bound = threading.local()
        #: Whether this store's last call met a broken connection, and when (monotonic) a
        #: call first got through after the last such failure (see `answering_for`).
        self._down = False
        self._back_at: float | None = None
        self._capped = True
        self._capped_until = 0.0
        self.read_only = read_only
        #: Whether the schema keeps counts by status (migration 5) and by batch (6); a
        #: watcher may find an older one, which it never migrates.
        self._kept_counts = self._kept_batch_counts = True
        if read_only:
            version = self._on_own_connection(self._check_schema)
            self._kept_counts = version >= _KEPT_COUNTS
            self._kept_batch_counts = version >= _KEPT_BATCH_COUNTS
        else:
            self._on_own_connection(self._migrate)
        self.pool = _pool(
            self._conninfo,
            min_size=pool_min,
            max_size=pool_max,
            kwargs={"autocommit": True},
            open=False,
            name=f"taskfuse:{self.schema}",
            timeout=max(1.0, connect_timeout),
        )
        try:
            self.pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self.pool.close()
            raise StoreUnavailable(
                f"cannot reach PostgreSQL store {self.url!r}: {self._scrub(exc)}"
            ) from None
        self._listener = _Listener(self._conninfo, self._scrub)

    @classmethod
    def from_url(cls, url: str, read_only: bool = False) -> PostgresStore:
        return cls(url, read_only=read_only)

    # -- plumbing --------------------------------------------------------------------------

    def _scrub(self, exc: BaseException) -> str:
        return describe_error(exc)  # one line, credentials masked

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of its own (outside the pool), its failure as one store error."""
        try:
            return psycopg.connect(self._conninfo)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                f"cannot reach PostgreSQL store {self.url!r}: {self._scrub(exc)}"
            ) from None
        except psycopg.ProgrammingError as exc:
            raise StoreURLError(f"bad PostgreSQL URL {self.url!r}: {self._scrub(exc)}") from None

    def _on_own_connection(self, step: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run an opening step in one transaction on a connection of its own; run it again
        if the session ends midway.

        A refused connection is an answer at once (a wrong URL must not hang for retry_for),
        but a session ended mid-step (a server restart, an administrator's kill) is the
        fault every store call survives, and a worker starting just then must survive it
        too: the step is one transaction, so the dropped one left nothing behind.
        """
        delay = 0.02
        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                with self._connect() as conn:
                    return step(conn)
            except psycopg.OperationalError as exc:
                if not transient(exc):
                    raise self._refused(exc) from None
                delay = self._wait_to_retry(exc, deadline, delay)

    def _refused(self, exc: psycopg.Error) -> StoreError:
        """A permanent error as the call's answer: what PostgreSQL refused, and why."""
        return StoreError(f"PostgreSQL store {self.url!r} refused a value or a statement: "
                          f"{self._scrub(exc)}")

    def _wait_to_retry(self, exc: psycopg.OperationalError, deadline: float,
                       delay: float) -> float:
        """Give up with one line once `deadline` has passed, else say so, wait `delay` and
        answer the next, longer one."""
        if time.monotonic() >= deadline or self._closed:
            raise StoreUnavailable(
                f"PostgreSQL store {self.url!r} unavailable: {self._scrub(exc)}"
            ) from None
        log.warning("PostgreSQL store %s: %s; retrying in %.2fs", self.url,
                    self._scrub(exc), delay)
        time.sleep(delay)
        return min(delay * 2, 1.0)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema and apply each numbered migration it lacks, under a lock."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                     [f"taskfuse-migrate:{self.schema}"])
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
            sql.Identifier(self.schema)))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS taskfuse_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {v for (v,) in conn.execute("SELECT version FROM taskfuse_migrations")}
        for mig in migrations("postgres"):
            if mig.version not in done:
                conn.execute(mig.sql.encode())
                conn.execute("INSERT INTO taskfuse_migrations (version, name) VALUES (%s, %s)",
                             [mig.version, mig.name])

    def schema_version(self) -> int:
        """The highest migration applied to this schema."""
        return int(self._run(lambda c, _: c.execute(
            "SELECT max(version) FROM taskfuse_migrations").fetchone()[0]) or 0)

    def _run(self, op: Op[T]) -> T:
        """Run `op(conn, retried)` on a pooled connection; retry broken connections.

        `retried` tells the op that an earlier attempt failed, possibly after its commit was
        sent, so it must first find out whether that attempt landed.
        """
        if self._closed:
            raise StoreError(f"PostgresStore({self.url!r}) is closed")
        delay = 0.02
        deadline: float | None = getattr(self._bound, "until", None)
        retried = False
        while True:
            wait = None if deadline is None else max(0.05, deadline - time.monotonic())
            try:
                with self.pool.connection(timeout=wait) as conn:
                    answer = op(conn, retried)
                if self._down:  # the first call through after an outage
                    self._down, self._back_at = False, time.monotonic()
                return answer
            except psycopg.DataError as exc:  # a value PostgreSQL refuses (e.g. NUL in JSON)
                raise self._refused(exc) from None
            except psycopg.OperationalError as exc:
                if not transient(exc):  # an answer, not an outage (store/classify.py)
                    raise self._refused(exc) from None
                # a broken connection, not a busy pool: only an outage delays the sweeper
                self._down = self._down or not isinstance(exc, PoolTimeout)
                if deadline is None:
                    deadline = time.monotonic() + self.retry_for
                delay = self._wait_to_retry(exc, deadline, delay)
                self.pool.check()  # a pool timeout too: the pool may have room to grow
                retried = True

    def answering_for(self) -> float:
        """Seconds the database has answered without a break, as far as this store can tell:
        since the server last started (a restart ends most outages) and since this
        process's calls last met a broken connection. The sweeper gives lapsed leases that
        long to be renewed (`Scheduler.sweep`): a worker that held an outcome through an
        outage could not heartbeat meanwhile. An outage this process did not see and that
        did not restart the server (a network cut while the sweeper slept) is not known."""
        uptime = float(self._run(lambda conn, _: conn.execute(Q["server_uptime"]).fetchone()[0]))
        back_at = self._back_at
        return uptime if back_at is None else min(uptime, time.monotonic() - back_at)

    @contextmanager
    def retries_within(self, seconds: float) -> Iterator[None]:
        """This thread's calls give up after `seconds` from now (see taskfuse.store.bounded)."""
        previous = getattr(self._bound, "until", None)
        until = time.monotonic() + seconds
        self._bound.until = until if previous is None else min(previous, until)
        try:
            yield
        finally:
            self._bound.until = previous

    def close(self) -> None:
        """Stop listening and close the pool; the store is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        self._listener.close()
        self.pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _notify(self, cur: psycopg.Cursor[Any], channel: str | None = None) -> None:
        cur.execute(Q["notify"], {"channel": channel or self.work_channel})

    # -- writing ---------------------------------------------------------------------------

    def insert(self, tasks: Sequence[Task]) -> list[tuple[Task, bool]]:
        """Insert all or nothing; (existing, False) for a task whose idempotency_key exists.

        Payloads are serialized before the transaction starts, so a bad one writes nothing.
        A concurrent submitter of the same key loses the unique index and is re-run, then
        answered with the winner's task.
        """
        payloads = [dumps(t.payload, t.task_id, "payload") for t in tasks]
        results = [dumps(t.result, t.task_id, "result") for t in tasks]
        if not tasks:
            return []

        def op(conn: psycopg.Connection[Any], retried: bool) -> list[tuple[Task, bool]]:
            if retried:
                landed = self._insert_landed(conn, tasks)
                if landed is not None:
                    return landed
            with conn.transaction():
                return self._insert_in(conn.cursor(), tasks, payloads, results)

        for _ in range(5):
            try:
                done = self._run(op)
            except pg_errors.UniqueViolation as exc:
                if exc.diag.constraint_name != "tasks_idempotency_key":
                    raise StoreError(f"task_id already exists: {self._scrub(exc)}") from None
                continue
            if len(tasks) >= _BULK_ROWS:
                self._analyze_if_unseen(len(tasks))
            return done
        raise StoreError("insert kept colliding with concurrent submitters of the same keys")

    def _analyze_if_unseen(self, inserted: int) -> None:
        """ANALYZE the table when the planner still believes it holds far fewer PENDING rows
        than were just submitted.

        Statistics taken while the table held (almost) no PENDING rows make the planner pick
        the status index and sort every PENDING row on each claim instead of walking the
        ordered claim index: measured on 1M rows with 20k new ones, claims ran 35x slower
        until autovacuum's next analyze, which a bulk submit of under 10 % of the table never
        triggers. One EXPLAIN after a bulk submit finds it; the ANALYZE runs at most once per
        bulk load (after it, the estimate holds). Best effort: the tasks are committed
        whatever happens here.
        """
        def op(conn: psycopg.Connection[Any], _: bool) -> None:
            plan = conn.execute(Q["pending_estimate"]).fetchone()
            estimate = plan[0][0]["Plan"]["Plan Rows"] if plan else 0
            if estimate < inserted / 2:
                conn.execute(Q["analyze_tasks"])

        try:
            self._run(op)
        except (StoreError, psycopg.Error) as exc:
            log.debug("no ANALYZE after a bulk submit: %s", exc)

    def _insert_in(
        self,
        cur: psycopg.Cursor[Any],
        tasks: Sequence[Task],
        payloads: list[str | None],
        results: list[str | None],
    ) -> list[tuple[Task, bool]]:
        keys = [t.idempotency_key for t in tasks if t.idempotency_key]
        owners: dict[str, Task] = {}
        if keys:
            for row in cur.execute(Q["tasks_by_key"], {"keys": keys}):
                task = _row_to_task(row)
                owners[task.idempotency_key or ""] = task
        out: list[tuple[Task, bool]] = []
        fresh: list[int] = []
        for index, task in enumerate(tasks):
            key = task.idempotency_key
            if key and key in owners:
                out.append((owners[key], False))
                continue
            if key:
                owners[key] = task
            fresh.append(index)
            out.append((task, True))
        if not fresh:
            return out
        ids = [tasks[i].task_id for i in fresh]
        seen: set[str] = set()
        for task_id in ids:
            if task_id in seen:
                raise StoreError(f"task_id {task_id!r} appears twice in one insert")
            seen.add(task_id)
        clash = cur.execute(Q["existing_id"], {"ids": ids}).fetchone()
        if clash:
            raise StoreError(f"task_id {clash[0]!r} already exists")
        parents = sorted({d for i in fresh for d in tasks[i].depends_on})
        status_of: dict[str, str] = {}
        if parents:
            status_of.update(cur.execute(Q["mark_parents"], {"ids": parents}).fetchall())
            problem = missing_dependency([(tasks[i].task_id, tasks[i].depends_on)
                                          for i in fresh], status_of.__contains__)
            if problem is not None:  # the transaction rolls back: nothing is written
                raise problem
        awaited = {d for i in fresh for d in tasks[i].depends_on}
        awaited.update(r[0] for r in cur.execute(Q["awaited_ids"], {"ids": ids}))
        deps: list[tuple[str, int, str]] = []
        with cur.copy(Q["copy_tasks"]) as copy:
            for i in fresh:
                t = tasks[i]
                unmet = 0
                for pos, dep in enumerate(t.depends_on):
                    if status_of.get(dep) != "SUCCESS":
                        unmet += 1
                    deps.append((t.task_id, pos, dep))
                status_of[t.task_id] = _VALUE[t.status]
                copy.write_row((
                    t.task_id, t.kind, payloads[i], t.batch_id, t.trace_id, t.idempotency_key,
                    list(t.depends_on), t.priority, _VALUE[t.status], t.version, t.retry_count,
                    t.max_retry, t.timeout, t.not_before, t.created_at, t.started_at,
                    t.finished_at, t.worker_id, results[i], t.error_kind, t.error_msg,
                    list(t.downstreams), t.heartbeat_at, t.last_delay, t.pending_since,
                    t.operator_retries, t.operator_retried_at, unmet, t.task_id in awaited,
                ))
        if deps:
            with cur.copy(Q["copy_deps"]) as copy:
                for dep_row in deps:
                    copy.write_row(dep_row)
        if any(tasks[i].status is _PENDING for i in fresh):
            self._notify(cur)
        return out

    def _insert_landed(
        self, conn: psycopg.Connection[Any], tasks: Sequence[Task]
    ) -> list[tuple[Task, bool]] | None:
        """After an unsure commit: the answer the insert gave if it landed, else None."""
        ids = [t.task_id for t in tasks]
        rows = {r[0]: r for r in conn.execute(Q["inserted_by_ids"], {"ids": ids})}
        ours = {t.task_id for t in tasks
                if t.task_id in rows and rows[t.task_id][1:] == (t.trace_id, t.created_at)}
        if not ours:
            return None
        keys = [t.idempotency_key for t in tasks if t.idempotency_key]
        owners = {t.idempotency_key: t for t in (_row_to_task(r) for r in conn.execute(
            Q["tasks_by_key"], {"keys": keys}))} if keys else {}
        out: list[tuple[Task, bool]] = []
        for task in tasks:
            if task.task_id in ours:
                out.append((task, True))
            elif task.idempotency_key and task.idempotency_key in owners:
                out.append((owners[task.idempotency_key], False))
            else:
                return None
        return out

    def swap(self, new: Task, expected_version: int) -> bool:
        """Compare-and-set one record; False (nothing written) if its version moved on."""
        params = _swap_params(new, expected_version)

        def op(conn: psycopg.Connection[Any], retried: bool) -> bool:
            if retried:
                row = conn.execute(Q["get_task"], {"task_id": new.task_id}).fetchone()
                stored = None if row is None else _row_to_task(row)
                if stored is None or stored.version != expected_version:
                    return stored is not None and _same_write(stored, new)
            # One statement, so one implicit transaction and one round trip: the trigger
            # does the rest (dependents, wake-ups) inside it.
            return conn.execute(Q["swap"], params).fetchone() is not None

        return self._run(op)

    def swap_many(self, moves: Sequence[tuple[Task, int]]) -> list[bool]:
        """Several compare-and-sets in one transaction (one commit, one round trip each way).

        Each move is checked on its own: a lost race answers False for that move only. This is
        how a worker reports a group of completions without paying a commit for each.
        """
        params = [_swap_params(new, expected) for new, expected in moves]
        if not moves:
            return []

        def op(conn: psycopg.Connection[Any], retried: bool) -> list[bool]:
            done: dict[int, bool] = {}
            if retried:
                for i, (new, expected) in enumerate(moves):
                    row = conn.execute(Q["get_task"], {"task_id": new.task_id}).fetchone()
                    stored = None if row is None else _row_to_task(row)
                    if stored is None or stored.version != expected:
                        done[i] = stored is not None and _same_write(stored, new)
            todo = [i for i in range(len(moves)) if i not in done]
            ids = [moves[i][0].task_id for i in todo]
            terminal = all(moves[i][0].status in TERMINAL for i in todo)
            if terminal and len(set(ids)) == len(ids):  # the usual group: one statement
                rows = json.dumps([params[i] for i in todo])
                lost = {r[0] for r in conn.execute(Q["swap_rows"], {"rows": rows})}
                for i in todo:
                    done[i] = moves[i][0].task_id not in lost
                return [done[i] for i in range(len(moves))]
            with conn.transaction():  # ticks due, or a task moved twice: one by one, in order
                cur = conn.cursor()
                cur.executemany(Q["swap"], [params[i] for i in todo], returning=True)
                for i in todo:
                    done[i] = cur.fetchone() is not None
                    cur.nextset()
            return [done[i] for i in range(len(moves))]

        return self._run(op)

    def heartbeat(self, task_id: str, version: int, now: float) -> bool:
        """Renew the lease of the attempt at `version` (heartbeat_at, no new version); False
        when that attempt is not the task's current one."""
        params = {"task_id": task_id, "version": version, "now": now}
        return self._run(lambda c, _: c.execute(Q["heartbeat"], params).rowcount == 1)

    def heartbeat_many(self, attempts: Sequence[tuple[str, int]], now: float) -> list[bool]:
        """Renew many attempts' leases in one statement (one round trip); a row another
        statement holds now is answered current and renewed at the next beat, never waited
        for (the query's comment: a wait there deadlocked with group commits)."""
        if not attempts:
            return []
        params = {"ids": [a[0] for a in attempts], "versions": [a[1] for a in attempts],
                  "now": now}
        renewed = self._run(lambda c, _: {(r[0], r[1])
                                          for r in c.execute(Q["heartbeat_many"], params)})
        return [tuple(a) in renewed for a in attempts]

    def beat_worker(self, beat: WorkerBeat) -> None:
        params = {"worker_id": beat.worker_id, "beat": json.dumps(beat._asdict()),
                  "beat_at": beat.beat_at}
        def op(conn: psycopg.Connection[Any], _: bool) -> None:
            conn.execute(Q["beat_worker"], params)
            self._fold(conn)  # every worker beats: the deltas stay short

        self._run(op)

    def has_unfinished(self, batch_id: str | None = None) -> bool:
        if batch_id is None:
            return bool(self._scalar("has_unfinished"))
        return bool(self._scalar("has_unfinished_batch", {"batch_id": batch_id}))

    def put_batch(self, batch: Batch) -> Batch:
        meta = dumps(dict(batch.meta), batch.batch_id, "batch meta") or "{}"
        params = {"batch_id": batch.batch_id, "cap": batch.cap, "created_at": batch.created_at,
                  "meta": meta}
        self._run(lambda c, _: c.execute(Q["put_batch"], params))
        if batch.cap is not None:
            self._capped, self._capped_until = True, 0.0
        found = self.get_batch(batch.batch_id)
        assert found is not None
        return found

    # -- claiming --------------------------------------------------------------------------

    def claim(
        self, worker_id: str, now: float, limit: int, blocked: frozenset[str] = frozenset(),
        exclude: frozenset[str] = frozenset(),
    ) -> list[Task]:
        """Move up to `limit` ready tasks to RUNNING for `worker_id` in one transaction."""
        if limit < 1:
            return []
        token = uuid.uuid4()
        blocked_list = sorted(blocked)
        exclude_list = sorted(exclude)
        params = {"now": now, "blocked": blocked_list, "exclude": exclude_list, "n": limit,
                  "worker_id": worker_id, "token": token, "status": _CLAIM_STATUS,
                  "bump": _CLAIM_BUMP}

        def op(conn: psycopg.Connection[Any], retried: bool) -> list[Task]:
            if retried:
                rows = conn.execute(Q["claimed_by_token"], {"token": token}).fetchall()
                if rows:
                    return [_row_to_task(r) for r in rows]
            if not self._any_capped(conn):  # the usual case: one statement, one round trip
                rows = conn.execute(Q["claim_one_statement"], params).fetchall()
                rows.sort(key=lambda r: r[-1])
                return [_row_to_task(r[:-1]) for r in rows]
            claimed: list[Task] = []
            with conn.transaction():
                cur = conn.cursor()
                while len(claimed) < limit:
                    want = limit - len(claimed)
                    rows = cur.execute(
                        Q["claim_candidates"],
                        {"now": now, "blocked": blocked_list, "n": want, "exclude": exclude_list},
                    ).fetchall()
                    if not rows:
                        break
                    picked = self._within_caps(cur, [_row_to_task(r) for r in rows])
                    if picked:
                        moved = [move(t, TaskEvent.CLAIM, now, worker_id=worker_id)
                                 for t in picked]
                        self._write_claims(cur, picked, moved, token)
                        claimed += moved
                    if len(rows) < want:
                        break
            return claimed

        return self._run(op)

    def _any_capped(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether some batch has a cap, asked at most once a second (other processes' new
        capped batches are seen within that second; one-statement claims never take a
        capped batch's task, so until then only the claim order between capped and uncapped
        batches can differ)."""
        now = time.monotonic()
        if now >= self._capped_until:
            self._capped = bool(conn.execute(Q["any_capped"]).fetchone()[0])
            self._capped_until = now + _CAPPED_TTL_S
        return self._capped

    @staticmethod
    def _write_claims(
        cur: psycopg.Cursor[Any], old: list[Task], new: list[Task], token: uuid.UUID
    ) -> None:
        """Write claimed records: one set-based compare-and-set when they differ only in
        version (what `move` builds for a claim), else one swap per record."""
        first = new[0]
        shape = (first.status, first.started_at, first.heartbeat_at, first.worker_id)
        uniform = all(
            (n.status, n.started_at, n.heartbeat_at, n.worker_id) == shape
            and n.finished_at is None
            and (n.retry_count, n.not_before, n.result, n.error_kind, n.error_msg,
                 n.last_delay) == (o.retry_count, o.not_before, o.result, o.error_kind,
                                   o.error_msg, o.last_delay)
            for o, n in zip(old, new, strict=True)
        )
        if uniform and first.started_at == first.heartbeat_at:
            written = 0
            for at in range(0, len(old), 4095):  # run ticks leave room for 4095 a statement
                part_old, part_new = old[at:at + 4095], new[at:at + 4095]
                cur.execute(Q["claim_rows"], {
                    "now": first.started_at, "worker_id": first.worker_id, "token": token,
                    "ids": [t.task_id for t in part_old],
                    "expected": [t.version for t in part_old],
                    "versions": [t.version for t in part_new],
                })
                written += cur.rowcount
            if written != len(old):
                raise StoreError("a locked candidate changed under its lock")
            return
        # only if `move` ever sets more on a claim: one compare-and-set per record
        cur.executemany(Q["swap"], [_swap_params(n, o.version, token)
                                    for o, n in zip(old, new, strict=True)])
        if cur.rowcount != len(old):
            raise StoreError("a locked candidate changed under its lock")

    @staticmethod
    def _within_caps(cur: psycopg.Cursor[Any], tasks: list[Task]) -> list[Task]:
        """Candidates in order, skipping those whose capped batch fills up on the way."""
        batch_ids = sorted({t.batch_id for t in tasks if t.batch_id is not None})
        if not batch_ids:
            return tasks
        caps = dict(cur.execute(Q["lock_batches"], {"ids": batch_ids}).fetchall())
        if not caps:
            return tasks
        running = dict(cur.execute(Q["running_in"], {"ids": list(caps)}).fetchall())
        room = {b: cap - running.get(b, 0) for b, cap in caps.items()}
        picked = []
        for task in tasks:
            left = room.get(task.batch_id)
            if left is not None:
                if left <= 0:
                    continue
                room[task.batch_id] = left - 1
            picked.append(task)
        return picked

    def prune(self, cutoff: float, statuses: Sequence[TaskStatus], batch_id: str | None,
              limit: int) -> dict[TaskStatus, int]:
        """Delete up to `limit` ended tasks (retention, `taskfuse.runtime.retention`) in one
        short transaction; answers how many of each status went. Two statements: lock the
        candidates, then delete those that still have no live dependent under a later
        snapshot (why: the queries' prune_rows)."""
        params = {"statuses": [_VALUE[s] for s in statuses], "cutoff": cutoff,
                  "batch": batch_id, "n": limit}

        def op(conn: psycopg.Connection[Any], _: bool) -> dict[TaskStatus, int]:
            gone: dict[TaskStatus, int] = {}
            rows: list[Any] = []
            with conn.transaction():
                locked = [r[0] for r in conn.execute(Q["prune_lock"], params)]
                if locked:
                    rows = conn.execute(Q["prune_rows"], {"ids": locked}).fetchall()
                if rows:
                    conn.execute(Q["prune_deps"], {"ids": [r[0] for r in rows]})
            for _, status in rows:
                gone[_STATUS[status]] = gone.get(_STATUS[status], 0) + 1
            return gone

        return self._run(op)

    def prunable(self, cutoff: float, statuses: Sequence[TaskStatus],
                 batch_id: str | None) -> dict[TaskStatus, int]:
        """What `prune` would delete in all, by status (a dry run)."""
        params = {"statuses": [_VALUE[s] for s in statuses], "cutoff": cutoff,
                  "batch": batch_id}
        return self._run(lambda c, _: {_STATUS[s]: n
                                       for s, n in c.execute(Q["prune_count"], params)})

    # -- waiting for work ------------------------------------------------------------------

    def wait_for_work(self, timeout: float) -> bool:
        """Block up to `timeout` s until another actor signals claimable work; True if so.

        Signals are PostgreSQL notifications (insert, back to PENDING, released dependents,
        a freed batch slot), so idle workers cost the database nothing while they wait. A
        True is a hint to claim, not a promise of a task.
        """
        if self._closed:
            return False
        return self._listener.wait(self.work_channel, timeout)

    def wait_for_done(self, timeout: float) -> bool:
        """Block up to `timeout` s until some task ended (a notification of migration 8);
        True if one did. A waiter of results then asks the store what it waits for."""
        if self._closed:
            return False
        return self._listener.wait(self.done_channel, timeout)

    # -- reading ---------------------------------------------------------------------------

    def _tasks(self, name: str, params: dict[str, Any] | None = None) -> list[Task]:
        return self._run(lambda c, _: [_row_to_task(r) for r in c.execute(Q[name], params)])

    def _scalar(self, name: str, params: dict[str, Any] | None = None) -> Any:
        def op(conn: psycopg.Connection[Any], _: bool) -> Any:
            row = conn.execute(Q[name], params).fetchone()
            return None if row is None else row[0]

        return self._run(op)

    def get(self, task_id: str) -> Task | None:
        def op(conn: psycopg.Connection[Any], _: bool) -> Task | None:
            row = conn.execute(Q["get_task"], {"task_id": task_id}).fetchone()
            return None if row is None else _row_to_task(row)

        return self._run(op)

    def counts(self, batch_id: str | None = None) -> dict[TaskStatus, int]:
        """By status, from the kept totals (a few rows), of the whole table or one batch."""
        def op(conn: psycopg.Connection[Any], _: bool) -> dict[TaskStatus, int]:
            if batch_id is None and not self._kept_counts:
                rows = conn.execute(Q["counts_scan"]).fetchall()
            elif batch_id is None:
                if not self.read_only:
                    self._fold(conn)
                rows = conn.execute(Q["counts"]).fetchall()
            else:
                query = "counts_batch" if self._kept_batch_counts else "counts_batch_scan"
                rows = conn.execute(Q[query], {"batch_id": batch_id}).fetchall()
            out = dict.fromkeys(TaskStatus, 0)
            for status, n in rows:
                out[_STATUS[status]] = n
            return out

        return self._run(op)

    def get_batch(self, batch_id: str) -> Batch | None:
        def op(conn: psycopg.Connection[Any], _: bool) -> Batch | None:
            row = conn.execute(Q["get_batch"], {"batch_id": batch_id}).fetchone()
            return None if row is None else Batch(row[0], row[1], row[2], row[3])

        return self._run(op)

    def batch_counts(self) -> dict[str, dict[TaskStatus, int]] | None:
        """Every batch (as `batch_ids` lists them) with its counts by status, from the kept
        counts in one query; None for a schema from before them (a watcher never migrates),
        where it would read every row: ask `counts(batch)` of the batches that can move."""
        if not self._kept_batch_counts:
            return None
        return counts_by_batch(self._run(lambda c, _: c.execute(Q["batch_counts"]).fetchall()))

    def batch_ids(self) -> list[str]:
        query = "batch_ids" if self._kept_batch_counts else "batch_ids_scan"
        return self._run(lambda c, _: [r[0] for r in c.execute(Q[query])])

    @staticmethod
    def _fold(conn: psycopg.Connection[Any]) -> None:
        """Move the kept counts' deltas into their totals, by status, then by batch: each
        statement its own transaction, each taking its rows in one order (no deadlock)."""
        conn.execute(Q["fold_counts"])
        conn.execute(Q["fold_batch_counts"])

    def dependents_of(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks that depend on any of these, each once (one query)."""
        found = self._tasks("dependents_of", {"ids": list(task_ids)})
        return list({t.task_id: t for t in found}.values())

    def cancel_batch(self, batch_id: str, now: float, error_kind: str,
                     reason: str) -> list[tuple[TaskStatus, Task]]:
        """Every unfinished task of the batch through the table's CANCEL move in one
        statement (one round trip, whatever the batch's size); answers (the status it left,
        its new record). Retried after an unsure commit, it answers what is left to cancel
        (nothing, if the first one landed)."""
        params = {"batch_id": batch_id, "now": now, "error_kind": error_kind,
                  "reason": reason, "dst": CANCEL_TO.value,
                  "sources": [s.value for s in CANCEL_FROM]}

        def op(conn: psycopg.Connection[Any], _: bool) -> list[tuple[TaskStatus, Task]]:
            rows = conn.execute(Q["cancel_batch"], params).fetchall()
            return [(TaskStatus(row[0]), _row_to_task(row[1:])) for row in rows]

        return self._run(op)

    def batch_tasks(
        self, batch_id: str, statuses: Iterable[TaskStatus] | None = None
    ) -> list[Task]:
        if statuses is None:
            return self._tasks("batch_tasks", {"batch_id": batch_id})
        wanted = [TaskStatus(s).value for s in statuses]
        return self._tasks("batch_tasks_in", {"batch_id": batch_id, "statuses": wanted})


    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.schema!r})"

    def _check_schema(self, conn: psycopg.Connection[Any]) -> int:
        """A read-only store must find its schema (it never creates one): refuse otherwise.
        Answers the schema's version."""
        found = conn.execute("SELECT to_regclass(%s)",
                             [f"{self.schema}.taskfuse_migrations"]).fetchone()
        if found is None or found[0] is None:
            raise StoreUnavailable(
                f"PostgreSQL store {self.url!r} has no taskfuse schema {self.schema!r}")
        row = conn.execute("SELECT max(version) FROM taskfuse_migrations").fetchone()
        return int(row[0] or 0) if row else 0
