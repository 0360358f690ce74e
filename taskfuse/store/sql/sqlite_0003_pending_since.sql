-- When a task last became PENDING (Task.pending_since, stamped by `task.move` on every move
-- into PENDING and at submit), so the sweeper's max age counts from there and not from
-- created_at: a task just retried, released, deferred or requeued by the sweeper is not one
-- that waited too long.
--
--   tasks_waiting   the sweeper's max-age rule (waiting_since_before): PENDING rows by
--                   when they began waiting, max(pending_since, not_before). Partial: a
--                   finished row costs it nothing, a move into PENDING one entry.
--
-- Rows already PENDING here were stamped before this column existed, so when they last
-- became PENDING is unknown: they count from now, the upgrade (a sweep may then cancel them
-- later than it would have, never earlier).

ALTER TABLE tasks ADD COLUMN pending_since REAL;

UPDATE tasks SET pending_since = max(created_at, (julianday('now') - 2440587.5) * 86400.0)
WHERE status = 'PENDING';

CREATE INDEX tasks_waiting
    ON tasks (max(coalesce(pending_since, created_at),
                  coalesce(not_before, pending_since, created_at)), seq)
    WHERE status = 'PENDING';
