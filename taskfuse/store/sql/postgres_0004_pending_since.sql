-- When a task last became PENDING (Task.pending_since, stamped by `task.move` on every move
-- into PENDING and at submit), so the sweeper's max age counts from there and not from
-- created_at: a task just retried, released, deferred or requeued by the sweeper is not one
-- that waited too long.
--
--   tasks_waiting   the sweeper's max-age rule (waiting_since_before): PENDING rows by
--                   when they began waiting, greatest(pending_since, not_before). Partial: a
--                   finished row costs it nothing, a move into PENDING one entry.
--
-- Adding a nullable column rewrites nothing. Rows already PENDING here were stamped before
-- this column existed, so when they last became PENDING is unknown: they count from now, the
-- upgrade (a sweep may then cancel them later than it would have, never earlier).

ALTER TABLE tasks ADD COLUMN pending_since double precision;

UPDATE tasks SET pending_since = greatest(created_at, extract(epoch FROM now()))
WHERE status = 'PENDING';

CREATE INDEX tasks_waiting
    ON tasks ((greatest(coalesce(pending_since, created_at), not_before)), seq)
    WHERE status = 'PENDING';
