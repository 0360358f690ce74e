-- One row per worker process: its last heartbeat (threads, busy, stuck threads by kind,
-- counts), written by the runner on every heartbeat and read by the fleet view and
-- `taskfuse status`. A JSON object, so a new field needs no migration.
CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    beat      TEXT NOT NULL,
    beat_at   REAL NOT NULL
);
