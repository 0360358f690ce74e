-- Counts by status kept as the table changes, so `counts` reads a few small rows instead of
-- every task (35 ms at 1M rows, asked once a second by each worker's trace sampler and each
-- watcher, and growing with the table).
--  * Each statement that inserts, updates or deletes tasks appends its net change per status
--    to task_count_deltas (statement triggers over transition tables: a claim or a group of
--    completions adds two rows, a heartbeat none). Appending takes no row lock, so writers
--    never wait on each other for a counter.
--  * `fold_counts` moves the deltas into task_counts (one statement; folders that meet wait
--    on the same rows in the same order, so they never deadlock). Writers fold when they
--    count and when a worker beats, so the deltas stay a few seconds' worth.
--  * `counts` sums task_counts and the deltas not yet folded in one snapshot: exact.
-- The triggers are created before the first count: they lock the table against writers
-- until this migration commits, so no change falls between the count and the triggers.
-- With counts kept here, nothing needs the index of every row by status any more; dropping
-- it spares every status move one index insert (has_unfinished probes the partial indexes
-- of RUNNING and PENDING rows instead).

CREATE TABLE task_counts (
    status text PRIMARY KEY,
    n      bigint NOT NULL
);

CREATE TABLE task_count_deltas (
    status text NOT NULL,
    n      bigint NOT NULL
);

CREATE FUNCTION taskfuse_count_inserted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, count(*) FROM new_rows GROUP BY status;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskfuse_count_updated() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, sum(d) FROM (SELECT status, 1 AS d FROM new_rows
                                UNION ALL SELECT status, -1 AS d FROM old_rows) AS moved
    GROUP BY status HAVING sum(d) <> 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskfuse_count_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO task_count_deltas (status, n)
    SELECT status, -count(*) FROM old_rows GROUP BY status;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskfuse_count_truncated() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM task_count_deltas;
    DELETE FROM task_counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskfuse_count_inserted();
CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskfuse_count_updated();
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskfuse_count_deleted();
CREATE TRIGGER tasks_count_truncate AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION taskfuse_count_truncated();

INSERT INTO task_counts (status, n) SELECT status, count(*) FROM tasks GROUP BY status;

DROP INDEX tasks_status;
