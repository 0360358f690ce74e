-- The task table, its dependency table and batches (SQLite).
--
-- Indexes exist for the questions the scheduler asks on its hot paths, each a range scan
-- whose cost does not grow with finished rows:
--   tasks_ready     claim: PENDING rows whose dependencies are all SUCCESS, in claim order
--   tasks_delayed   next_ready_at: PENDING rows held back by not_before
--   tasks_deadline  overdue / next_deadline / running / stale_running: RUNNING rows
--   tasks_status    counts by status, and the sweeper's max-age rule (PENDING by created_at)
-- Partial indexes only hold live rows, so a million finished tasks cost them nothing.

CREATE TABLE tasks (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id         TEXT NOT NULL UNIQUE,
    kind            TEXT NOT NULL,
    payload         TEXT,
    batch_id        TEXT,
    trace_id        TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    depends_on      TEXT NOT NULL DEFAULT '[]',
    priority        INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL
                    CHECK (status IN ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED', 'TIMEOUT',
                                      'CANCELED')),
    version         INTEGER NOT NULL,
    retry_count     INTEGER NOT NULL,
    max_retry       INTEGER NOT NULL,
    timeout         REAL NOT NULL,
    not_before      REAL,
    created_at      REAL NOT NULL,
    started_at      REAL,
    finished_at     REAL,
    worker_id       TEXT,
    result          TEXT,
    error_kind      TEXT,
    error_msg       TEXT,
    downstreams     TEXT NOT NULL DEFAULT '[]',
    heartbeat_at    REAL,
    last_delay      REAL,
    unmet           INTEGER NOT NULL DEFAULT 0,
    ready_tick      INTEGER NOT NULL DEFAULT 0,
    run_tick        INTEGER,
    claim_token     TEXT,
    ready_at        REAL GENERATED ALWAYS AS (coalesce(not_before, created_at)) VIRTUAL,
    deadline        REAL GENERATED ALWAYS AS (started_at + timeout) VIRTUAL
) STRICT;

CREATE INDEX tasks_ready ON tasks (priority DESC, ready_at, ready_tick, seq)
    WHERE status = 'PENDING' AND unmet = 0;
CREATE INDEX tasks_delayed ON tasks (not_before)
    WHERE status = 'PENDING' AND unmet = 0 AND not_before IS NOT NULL;
CREATE INDEX tasks_deadline ON tasks (deadline, run_tick) WHERE status = 'RUNNING';
CREATE INDEX tasks_trace ON tasks (trace_id);
CREATE INDEX tasks_batch ON tasks (batch_id, status) WHERE batch_id IS NOT NULL;
CREATE INDEX tasks_status ON tasks (status, created_at);

-- One row per entry of a task's depends_on (pos keeps order and repeats).
CREATE TABLE task_deps (
    task_id    TEXT NOT NULL,
    pos        INTEGER NOT NULL,
    depends_on TEXT NOT NULL,
    PRIMARY KEY (task_id, pos)
) STRICT, WITHOUT ROWID;

CREATE INDEX task_deps_parent ON task_deps (depends_on);

CREATE TABLE batches (
    batch_id   TEXT PRIMARY KEY,
    cap        INTEGER,
    created_at REAL NOT NULL,
    meta       TEXT NOT NULL DEFAULT '{}',
    seq        INTEGER NOT NULL
) STRICT;

-- The monotonic counter behind seq-like ticks (one row).
CREATE TABLE taskfuse_counter (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    tick INTEGER NOT NULL
) STRICT;

INSERT INTO taskfuse_counter (id, tick) VALUES (1, 0);
