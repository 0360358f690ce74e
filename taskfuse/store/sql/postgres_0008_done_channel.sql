-- Waiters (`taskfuse wait`, Runner.wait) sleep until a task ends instead of polling: every
-- move into an ended status NOTIFYs the schema's done channel, delivered at commit. The work
-- channel (migration 1) misses the ends that free no claimable work (a task of no batch, a
-- PENDING task canceled). Notifications of one transaction with the same payload fold into
-- one, so a worker's group commit of many completions sends one; nobody listens to this
-- channel but waiters, so workers are not woken by it.
CREATE FUNCTION taskfuse_after_end() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify('taskfuse_done_' || TG_TABLE_SCHEMA, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_after_end AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('SUCCESS', 'FAILED', 'TIMEOUT', 'CANCELED'))
    EXECUTE FUNCTION taskfuse_after_end();
