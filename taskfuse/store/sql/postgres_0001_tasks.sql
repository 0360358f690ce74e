-- The task table, its dependency table and batches (PostgreSQL).
--
-- Indexes exist for the questions the scheduler asks on its hot paths, each a range scan
-- whose cost does not grow with finished rows:
--   tasks_ready     claim: PENDING rows whose dependencies are all SUCCESS, in claim order
--   tasks_delayed   next_ready_at: PENDING rows held back by not_before
--   tasks_deadline  overdue / next_deadline / running / stale_running: RUNNING rows
--   tasks_status    counts by status, and the sweeper's max-age rule (PENDING by created_at)
-- Partial indexes only hold live rows, so a million finished tasks cost them nothing.
-- Every index costs each status change an index entry (a status change is never a HOT
-- update), so there are no others: seq is ordered within tasks_ready, not indexed alone.

CREATE SEQUENCE taskfuse_tick;

CREATE TABLE tasks (
    task_id         text PRIMARY KEY,
    seq             bigint NOT NULL DEFAULT nextval('taskfuse_tick'),
    kind            text NOT NULL,
    payload         jsonb,
    batch_id        text,
    trace_id        text NOT NULL,
    idempotency_key text,
    depends_on      text[] NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    status          text NOT NULL
                    CONSTRAINT tasks_status_check
                    CHECK (status IN ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED', 'TIMEOUT',
                                      'CANCELED')),
    version         integer NOT NULL,
    retry_count     integer NOT NULL,
    max_retry       integer NOT NULL,
    timeout         double precision NOT NULL,
    not_before      double precision,
    created_at      double precision NOT NULL,
    started_at      double precision,
    finished_at     double precision,
    worker_id       text,
    result          jsonb,
    error_kind      text,
    error_msg       text,
    downstreams     text[] NOT NULL DEFAULT '{}',
    heartbeat_at    double precision,
    last_delay      double precision,
    unmet           integer NOT NULL DEFAULT 0,
    ready_tick      bigint NOT NULL DEFAULT nextval('taskfuse_tick'),
    run_tick        bigint,
    claim_token     uuid,
    has_children    boolean NOT NULL DEFAULT false,
    ready_at        double precision GENERATED ALWAYS AS (coalesce(not_before, created_at)) STORED,
    deadline        double precision GENERATED ALWAYS AS (started_at + timeout) STORED
);

CREATE UNIQUE INDEX tasks_idempotency_key ON tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
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
    task_id    text NOT NULL,
    pos        integer NOT NULL,
    depends_on text NOT NULL,
    PRIMARY KEY (task_id, pos)
);

CREATE INDEX task_deps_parent ON task_deps (depends_on);

CREATE TABLE batches (
    batch_id   text PRIMARY KEY,
    cap        integer,
    created_at double precision NOT NULL,
    meta       jsonb NOT NULL DEFAULT '{}',
    seq        bigint NOT NULL DEFAULT nextval('taskfuse_tick')
);

-- What follows a status change, in the same statement as the compare-and-set, so a swap is
-- one round trip and can never half-happen:
--  * a task reaching SUCCESS releases its dependents (one unmet dependency fewer; those that
--    become claimable take a fresh ready tick). Each query of a PL/pgSQL function takes a new
--    snapshot, so a dependent inserted while the parent's row was locked is seen and released.
--  * moves that may make work claimable (back to PENDING, dependents released, a RUNNING task
--    of a batch freeing its slot) NOTIFY the schema's work channel, delivered at commit.
-- `SET search_path FROM CURRENT` pins the schema the migration ran in, whatever the caller's.
CREATE FUNCTION taskfuse_after_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status = 'SUCCESS' AND NEW.has_children THEN
        UPDATE tasks AS t SET
            unmet = t.unmet - d.n,
            ready_tick = CASE WHEN t.status = 'PENDING' AND t.unmet = d.n
                              THEN (SELECT nextval('taskfuse_tick')) ELSE t.ready_tick END
        FROM (SELECT task_id, count(*) AS n FROM task_deps
              WHERE depends_on = NEW.task_id GROUP BY task_id) AS d
        WHERE t.task_id = d.task_id;
    END IF;
    PERFORM pg_notify('taskfuse_work_' || TG_TABLE_SCHEMA, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_after_move AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND ((NEW.status = 'SUCCESS' AND NEW.has_children)
               OR NEW.status = 'PENDING'
               OR (OLD.status = 'RUNNING' AND NEW.batch_id IS NOT NULL)))
    EXECUTE FUNCTION taskfuse_after_move();
