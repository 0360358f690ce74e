-- Counts by batch and status kept as the table changes, as migration 4 keeps them by status,
-- so `counts(batch)` and `batch_ids` read a few rows instead of the batch's rows (the fleet
-- view and `taskfuse status` ask them for every batch; at a million rows a batch's count
-- read 333k index entries and the list read them all).
--  * The same row triggers, one statement more each: an insert adds one to its batch's
--    status, a status change moves one, a delete takes one away. A task without a batch
--    touches nothing here; a task's batch never changes (no statement sets it after insert).
--  * first_seq is the batch's first task (for the order of batches only named by tasks).
--    Rows whose count fell to 0 stay (a batch emptied by deletes is not listed).

CREATE TABLE batch_counts (
    batch_id  TEXT NOT NULL,
    status    TEXT NOT NULL,
    n         INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    PRIMARY KEY (batch_id, status)
) WITHOUT ROWID, STRICT;

INSERT INTO batch_counts (batch_id, status, n, first_seq)
SELECT batch_id, status, count(*), min(seq) FROM tasks
WHERE batch_id IS NOT NULL GROUP BY batch_id, status;

DROP TRIGGER tasks_count_insert;
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
BEGIN
    UPDATE task_counts SET n = n + 1 WHERE status = NEW.status;
    INSERT INTO batch_counts (batch_id, status, n, first_seq)
    SELECT NEW.batch_id, NEW.status, 1, NEW.seq WHERE NEW.batch_id IS NOT NULL
    ON CONFLICT (batch_id, status) DO UPDATE SET n = n + 1,
        first_seq = min(first_seq, excluded.first_seq);
END;

DROP TRIGGER tasks_count_update;
CREATE TRIGGER tasks_count_update AFTER UPDATE OF status ON tasks
WHEN OLD.status IS NOT NEW.status
BEGIN
    UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE task_counts SET n = n + 1 WHERE status = NEW.status;
    UPDATE batch_counts SET n = n - 1
    WHERE NEW.batch_id IS NOT NULL AND batch_id = NEW.batch_id AND status = OLD.status;
    INSERT INTO batch_counts (batch_id, status, n, first_seq)
    SELECT NEW.batch_id, NEW.status, 1, NEW.seq WHERE NEW.batch_id IS NOT NULL
    ON CONFLICT (batch_id, status) DO UPDATE SET n = n + 1,
        first_seq = min(first_seq, excluded.first_seq);
END;

DROP TRIGGER tasks_count_delete;
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
BEGIN
    UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE batch_counts SET n = n - 1
    WHERE OLD.batch_id IS NOT NULL AND batch_id = OLD.batch_id AND status = OLD.status;
END;
