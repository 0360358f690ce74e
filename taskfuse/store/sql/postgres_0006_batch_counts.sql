-- Counts by batch and status kept as the table changes, as migration 5 keeps them by status,
-- so `counts(batch)` and `batch_ids` read a few rows instead of the batch's rows (at a million
-- rows in three batches a batch's count took 0.1 s and the list 0.15 s, asked for every
-- batch by the fleet view and `taskfuse status`).
--  * The same statement triggers append, beside the net change per status, the net change
--    per batch and status to batch_count_deltas (a task without a batch adds nothing; a
--    task's batch never changes after insert). `fold_batch_counts` moves them into
--    batch_counts as `fold_counts` does, in one order, so folders never deadlock; readers
--    sum both in one snapshot: exact.
--  * first_seq is the batch's first task (for the order of batches only named by tasks).
--    Rows whose count fell to 0 stay (a batch emptied by deletes is not listed).
-- The table is locked against writers first: replacing the trigger functions takes no lock
-- on it, and no change may fall between the count below and the new functions.

LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE batch_counts (
    batch_id  text NOT NULL,
    status    text NOT NULL,
    n         bigint NOT NULL,
    first_seq bigint NOT NULL,
    PRIMARY KEY (batch_id, status)
);

CREATE TABLE batch_count_deltas (
    batch_id  text NOT NULL,
    status    text NOT NULL,
    n         bigint NOT NULL,
    first_seq bigint NOT NULL
);

CREATE OR REPLACE FUNCTION taskfuse_count_inserted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, count(*) FROM new_rows GROUP BY status;
    INSERT INTO batch_count_deltas (batch_id, status, n, first_seq)
    SELECT batch_id, status, count(*), min(seq) FROM new_rows
    WHERE batch_id IS NOT NULL GROUP BY batch_id, status;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION taskfuse_count_updated() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, sum(d) FROM (SELECT status, 1 AS d FROM new_rows
                                UNION ALL SELECT status, -1 AS d FROM old_rows) AS moved
    GROUP BY status HAVING sum(d) <> 0;
    INSERT INTO batch_count_deltas (batch_id, status, n, first_seq)
    SELECT batch_id, status, sum(d), min(seq)
    FROM (SELECT batch_id, status, seq, 1 AS d FROM new_rows WHERE batch_id IS NOT NULL
          UNION ALL
          SELECT batch_id, status, seq, -1 AS d FROM old_rows WHERE batch_id IS NOT NULL
         ) AS moved
    GROUP BY batch_id, status HAVING sum(d) <> 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION taskfuse_count_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, -count(*) FROM old_rows GROUP BY status;
    INSERT INTO batch_count_deltas (batch_id, status, n, first_seq)
    SELECT batch_id, status, -count(*), min(seq) FROM old_rows
    WHERE batch_id IS NOT NULL GROUP BY batch_id, status;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION taskfuse_count_truncated() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM task_count_deltas;
    DELETE FROM task_counts;
    DELETE FROM batch_count_deltas;
    DELETE FROM batch_counts;
    RETURN NULL;
END
$$;

INSERT INTO batch_counts (batch_id, status, n, first_seq)
SELECT batch_id, status, count(*), min(seq) FROM tasks
WHERE batch_id IS NOT NULL GROUP BY batch_id, status;
