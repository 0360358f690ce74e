-- Named queries of PostgresStore. `{task}` stands for the task columns (sql.SELECT_TASK).
-- Status literals are written out (not bound) so the planner can use the partial indexes.

-- get_task --
SELECT {task} FROM tasks WHERE task_id = %(task_id)s

-- find_tasks --
-- The task with that id first (unless it is also in the trace), then the trace in order.
SELECT {task} FROM tasks
WHERE task_id = %(key)s OR trace_id = %(key)s
ORDER BY (task_id = %(key)s AND trace_id <> %(key)s) DESC, seq

-- search_tasks --
-- The fleet view's `/`: tasks whose id, trace, kind, batch or idempotency key contains the
-- text (any case), newest first, at most %(limit)s. The pattern comes escaped
-- (`like_pattern`): %% and _ in the text match themselves.
SELECT {task} FROM tasks
WHERE task_id ILIKE %(pattern)s ESCAPE '\' OR trace_id ILIKE %(pattern)s ESCAPE '\'
   OR kind ILIKE %(pattern)s ESCAPE '\' OR batch_id ILIKE %(pattern)s ESCAPE '\'
   OR idempotency_key ILIKE %(pattern)s ESCAPE '\'
ORDER BY seq DESC
LIMIT %(limit)s

-- existing_id --
SELECT task_id FROM tasks WHERE task_id = ANY(%(ids)s) LIMIT 1

-- tasks_by_key --
SELECT {task} FROM tasks WHERE idempotency_key = ANY(%(keys)s)

-- mark_parents --
-- The tasks new rows depend on learn they have dependents; the row lock this takes means a
-- parent's move to SUCCESS commits either before (we read SUCCESS) or after our insert (its
-- swap then sees has_children and releases us): no dependent misses its release.
UPDATE tasks SET has_children = true WHERE task_id = ANY(%(ids)s)
RETURNING task_id, status

-- copy_tasks --
COPY tasks ({task}, unmet, has_children) FROM STDIN

-- awaited_ids --
-- Which of these new tasks some stored task already depends on (inserted child-first).
SELECT DISTINCT depends_on FROM task_deps WHERE depends_on = ANY(%(ids)s)

-- copy_deps --
COPY task_deps (task_id, pos, depends_on) FROM STDIN

-- inserted_by_ids --
-- After an unsure commit: which of these rows exist, and with which trace (ours or not).
SELECT task_id, trace_id, created_at FROM tasks WHERE task_id = ANY(%(ids)s)

-- swap --
-- The compare-and-set: writes the lifecycle fields only if the version is still :expected.
-- A move into PENDING takes a fresh ready tick; a claim a run tick. The trigger
-- tasks_after_move releases dependents and wakes idle workers in the same statement.
UPDATE tasks SET
    status = %(status)s, version = %(version)s, retry_count = %(retry_count)s,
    not_before = %(not_before)s, started_at = %(started_at)s, finished_at = %(finished_at)s,
    worker_id = %(worker_id)s, result = %(result)s::jsonb, error_kind = %(error_kind)s,
    error_msg = %(error_msg)s, heartbeat_at = %(heartbeat_at)s, last_delay = %(last_delay)s,
    pending_since = %(pending_since)s, operator_retries = %(operator_retries)s,
    operator_retried_at = %(operator_retried_at)s,
    ready_tick = CASE WHEN %(status)s = 'PENDING' THEN nextval('taskfuse_tick')
                      ELSE ready_tick END,
    run_tick = CASE WHEN %(status)s = 'RUNNING' THEN nextval('taskfuse_tick') * 4096
                    ELSE run_tick END,
    claim_token = %(claim_token)s
WHERE task_id = %(task_id)s AND version = %(expected)s
RETURNING version

-- swap_rows --
-- Many compare-and-sets in one statement (swap_many: distinct tasks, each moving to a
-- terminal status, so no ticks are due): each row is written only if its own version is
-- still the expected one. %(rows)s is a JSON array of one object per move (keys: the
-- columns of u), as Python's json writes them: a float travels as its shortest exact
-- text, and one text parameter costs the worker a tenth of what seventeen arrays did.
-- Answers the moves that lost (none, usually: no row to fetch).
WITH u AS MATERIALIZED (
    SELECT * FROM json_to_recordset(%(rows)s::json)
        AS r(task_id text, expected integer, status text, version integer,
             retry_count integer, not_before double precision, started_at double precision,
             finished_at double precision, worker_id text, result text, error_kind text,
             error_msg text, heartbeat_at double precision, last_delay double precision,
             pending_since double precision, operator_retries integer,
             operator_retried_at double precision)
), won AS (
    UPDATE tasks AS t SET
        status = u.status, version = u.version, retry_count = u.retry_count,
        not_before = u.not_before, started_at = u.started_at, finished_at = u.finished_at,
        worker_id = u.worker_id, result = u.result::jsonb, error_kind = u.error_kind,
        error_msg = u.error_msg, heartbeat_at = u.heartbeat_at, last_delay = u.last_delay,
        pending_since = u.pending_since, operator_retries = u.operator_retries,
        operator_retried_at = u.operator_retried_at, claim_token = NULL
    FROM u
    WHERE t.task_id = u.task_id AND t.version = u.expected
    RETURNING t.task_id
)
SELECT u.task_id FROM u WHERE u.task_id NOT IN (SELECT task_id FROM won)

-- claim_candidates --
-- Ready rows in claim order: PENDING, dependencies met, not_before passed, no blocked
-- downstream, batch under its cap; rows another claimer holds are skipped, not waited for.
SELECT {task} FROM tasks AS t
WHERE t.status = 'PENDING' AND t.unmet = 0
  AND (t.not_before IS NULL OR t.not_before <= %(now)s)
  AND NOT (t.downstreams && %(blocked)s::text[])
  AND NOT (t.task_id = ANY(%(exclude)s::text[]))
  AND (t.batch_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM batches AS b
        WHERE b.batch_id = t.batch_id AND b.cap IS NOT NULL
          AND b.cap <= (SELECT count(*) FROM tasks AS r
                        WHERE r.batch_id = b.batch_id AND r.status = 'RUNNING')))
ORDER BY t.priority DESC, t.ready_at, t.ready_tick, t.seq
LIMIT %(n)s
FOR UPDATE OF t SKIP LOCKED

-- claim_one_statement --
-- The usual claim in one statement, so one round trip: pick ready rows of batches without a
-- cap (SKIP LOCKED: rows another claimer holds are passed over, never waited for) and move
-- them to RUNNING; the version check is the row lock plus the version read under it (a claim
-- is PENDING --claim--> RUNNING: :status is that table entry's target, :bump its version
-- step). The rows are found again by primary key and version only: a status condition there
-- let the planner, misled by statistics taken before a bulk submit, walk every PENDING row
-- once per claimed row.
-- Rows of capped batches are left to the transaction of `claim_candidates`, which counts a
-- batch's running tasks under its lock. Run ticks follow claim order.
WITH cand AS (
    SELECT t.task_id, t.version, t.priority, t.ready_at, t.ready_tick, t.seq FROM tasks AS t
    WHERE t.status = 'PENDING' AND t.unmet = 0
      AND (t.not_before IS NULL OR t.not_before <= %(now)s)
      AND NOT (t.downstreams && %(blocked)s::text[])
      AND NOT (t.task_id = ANY(%(exclude)s::text[]))
      AND (t.batch_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM batches AS b WHERE b.batch_id = t.batch_id AND b.cap IS NOT NULL))
    ORDER BY t.priority DESC, t.ready_at, t.ready_tick, t.seq
    LIMIT %(n)s
    FOR UPDATE OF t SKIP LOCKED
), picked AS (
    SELECT task_id, version,
           row_number() OVER (ORDER BY priority DESC, ready_at, ready_tick, seq)
           AS ord FROM cand
), tick AS (SELECT nextval('taskfuse_tick') AS v)
UPDATE tasks AS t SET
    status = %(status)s, version = t.version + %(bump)s, started_at = %(now)s,
    heartbeat_at = %(now)s, finished_at = NULL, worker_id = %(worker_id)s,
    run_tick = (SELECT v FROM tick) * 4096 + p.ord, claim_token = %(token)s
FROM picked AS p
WHERE t.task_id = p.task_id AND t.version = p.version
RETURNING {task_t}, p.ord

-- pending_estimate --
-- The planner's idea of how many rows are PENDING (no rows are read).
EXPLAIN (FORMAT JSON) SELECT 1 FROM tasks WHERE status = 'PENDING'

-- analyze_tasks --
ANALYZE tasks

-- any_capped --
-- Whether some batch has a concurrency cap (then claims take the transactional path).
SELECT EXISTS (SELECT 1 FROM batches WHERE cap IS NOT NULL)

-- claim_rows --
-- Move the picked candidates to RUNNING in one statement: the records `move` built differ
-- only in their versions, and each row is still checked against the version it was read at.
-- Run ticks are one tick x 4096 plus the position in the picked list (at most 4095 rows a
-- statement), so they follow claim order whatever order the rows are updated in.
UPDATE tasks AS t SET
    status = 'RUNNING', version = u.version, started_at = %(now)s, heartbeat_at = %(now)s,
    finished_at = NULL, worker_id = %(worker_id)s,
    run_tick = (SELECT nextval('taskfuse_tick')) * 4096 + u.ord,
    claim_token = %(token)s
FROM unnest(%(ids)s::text[], %(expected)s::integer[], %(versions)s::integer[])
     WITH ORDINALITY AS u(task_id, expected, version, ord)
WHERE t.task_id = u.task_id AND t.version = u.expected

-- lock_batches --
-- Capped batches among the candidates, locked so concurrent claimers count their running
-- tasks one after another: a cap holds across processes.
SELECT batch_id, cap FROM batches
WHERE batch_id = ANY(%(ids)s) AND cap IS NOT NULL
ORDER BY batch_id
FOR UPDATE

-- running_in --
-- Run after lock_batches, so its fresh snapshot sees every claim committed before ours.
SELECT batch_id, count(*) FROM tasks
WHERE batch_id = ANY(%(ids)s) AND status = 'RUNNING'
GROUP BY batch_id

-- notify --
SELECT pg_notify(%(channel)s, '')

-- heartbeat --
-- Renew the lease of one attempt: (task_id, version) names it; any other attempt renews nothing.
UPDATE tasks SET heartbeat_at = %(now)s
WHERE task_id = %(task_id)s AND version = %(version)s AND status = 'RUNNING'

-- heartbeat_many --
-- Renew many attempts' leases in one statement; only each task's current RUNNING attempt
-- (the version it was claimed at) is renewed. Answers the attempts still current: renewed,
-- or held right now by another statement (the completer writing its outcome, a sweeper, a
-- cancel), which is passed over, not waited for. A beat of thousands of rows that waited
-- for such a row could wait in a cycle with a group commit taking the same rows in another
-- order: a deadlock, a second's stall (deadlock_timeout) and a retry of both, seen at
-- 10,000 attempts in flight. A row passed over is renewed at the next beat, or that beat
-- finds it moved.
WITH live AS (
    SELECT t.task_id, t.version FROM tasks AS t
    JOIN unnest(%(ids)s::text[], %(versions)s::integer[]) AS u(task_id, version)
      ON t.task_id = u.task_id AND t.version = u.version
    WHERE t.status = 'RUNNING'
), free AS (
    SELECT t.task_id FROM tasks AS t JOIN live ON t.task_id = live.task_id
    FOR NO KEY UPDATE OF t SKIP LOCKED
), renewed AS (
    UPDATE tasks AS t SET heartbeat_at = %(now)s
    FROM free, live
    WHERE t.task_id = free.task_id AND live.task_id = t.task_id
      AND t.version = live.version AND t.status = 'RUNNING'
)
SELECT task_id, version FROM live

-- has_unfinished --
-- Two probes, each the partial index of RUNNING or of PENDING rows, stopped at its first
-- row: cheap whatever the table's size.
SELECT EXISTS (SELECT 1 FROM tasks WHERE status = 'RUNNING')
    OR EXISTS (SELECT 1 FROM tasks WHERE status = 'PENDING')

-- has_unfinished_batch --
SELECT EXISTS (SELECT 1 FROM tasks WHERE batch_id = %(batch_id)s
                                      AND status IN ('PENDING', 'RUNNING'))

-- overdue --
SELECT {task} FROM tasks
WHERE status = 'RUNNING' AND deadline < %(now)s
ORDER BY deadline, run_tick, priority DESC, ready_at, ready_tick, seq

-- next_deadline --
SELECT min(deadline) FROM tasks WHERE status = 'RUNNING'

-- running --
SELECT {task} FROM tasks WHERE status = 'RUNNING'
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- stale_running --
-- The sweeper's rule: the lease (heartbeat) lapsed, or older than 2 x timeout in any case.
SELECT {task} FROM tasks
WHERE status = 'RUNNING'
  AND ((%(lease)s::double precision IS NOT NULL AND heartbeat_at IS NOT NULL
        AND heartbeat_at + %(lease)s::double precision < %(now)s)
       OR coalesce(started_at, %(now)s) + 2 * timeout < %(now)s)
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- server_uptime --
-- Seconds since the server last started (a restart after an outage): the sweeper gives
-- leases that long to be renewed (Scheduler.sweep, PostgresStore.answering_for).
SELECT extract(epoch FROM now() - pg_postmaster_start_time())::double precision

-- running_over_limit --
-- The sweeper's third rule: an attempt beyond what max_retry allows (an impossible record).
SELECT {task} FROM tasks
WHERE status = 'RUNNING' AND retry_count > max_retry
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- waiting_since_before --
-- The sweeper's max-age rule: PENDING rows waiting since before :cutoff, from when they last
-- became PENDING or their not_before if later (Task.waiting_since; greatest() skips NULL),
-- through tasks_waiting, whose expression this repeats so the planner can match it.
SELECT {task} FROM tasks
WHERE status = 'PENDING'
  AND greatest(coalesce(pending_since, created_at), not_before) < %(cutoff)s
ORDER BY greatest(coalesce(pending_since, created_at), not_before), seq

-- next_ready_at --
SELECT min(not_before) FROM tasks
WHERE status = 'PENDING' AND unmet = 0 AND not_before IS NOT NULL AND not_before > %(now)s

-- dependents --
SELECT {task_t} FROM task_deps AS d JOIN tasks AS t ON t.task_id = d.task_id
WHERE d.depends_on = %(task_id)s
ORDER BY t.seq, d.pos

-- counts --
-- The folded totals and the deltas since, in one snapshot (migration 5).
SELECT status, sum(n)::bigint FROM (SELECT status, n FROM task_counts
                                    UNION ALL SELECT status, n FROM task_count_deltas) AS c
GROUP BY status

-- counts_scan --
-- A schema from before migration 5 (a watcher never migrates): every row, counted.
SELECT status, count(*) FROM tasks GROUP BY status

-- fold_counts --
-- Move the deltas into the totals. Rows are taken and totals updated in one order (the
-- deltas in the order they lie, the totals by status), so two folders wait, never deadlock.
WITH taken AS (DELETE FROM task_count_deltas RETURNING status, n)
INSERT INTO task_counts AS c (status, n)
SELECT status, sum(n) FROM taken GROUP BY status ORDER BY status
ON CONFLICT (status) DO UPDATE SET n = c.n + excluded.n

-- fold_batch_counts --
-- Move the batch deltas into their totals (migration 6), in one order as fold_counts does.
WITH taken AS (DELETE FROM batch_count_deltas RETURNING batch_id, status, n, first_seq)
INSERT INTO batch_counts AS c (batch_id, status, n, first_seq)
SELECT batch_id, status, sum(n), min(first_seq) FROM taken
GROUP BY batch_id, status ORDER BY batch_id, status
ON CONFLICT (batch_id, status) DO UPDATE
SET n = c.n + excluded.n, first_seq = least(c.first_seq, excluded.first_seq)

-- counts_batch --
-- A batch's folded totals and its deltas since, in one snapshot (migration 6).
SELECT status, sum(n)::bigint FROM (
    SELECT status, n FROM batch_counts WHERE batch_id = %(batch_id)s
    UNION ALL SELECT status, n FROM batch_count_deltas WHERE batch_id = %(batch_id)s
) AS c
GROUP BY status

-- counts_batch_scan --
-- A schema from before migration 6 (a watcher never migrates): the batch's rows, counted.
SELECT status, count(*) FROM tasks WHERE batch_id = %(batch_id)s GROUP BY status

-- batch_tasks --
SELECT {task} FROM tasks WHERE batch_id = %(batch_id)s ORDER BY seq

-- batch_tasks_in --
SELECT {task} FROM tasks
WHERE batch_id = %(batch_id)s AND status = ANY(%(statuses)s)
ORDER BY seq

-- all_tasks --
SELECT {task} FROM tasks ORDER BY seq

-- claimed_by_token --
-- After an unsure commit: did our claim land? Its rows carry the claim's token.
SELECT {task} FROM tasks WHERE claim_token = %(token)s AND status = 'RUNNING'
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- put_batch --
INSERT INTO batches (batch_id, cap, created_at, meta)
VALUES (%(batch_id)s, %(cap)s, %(created_at)s, %(meta)s::jsonb)
ON CONFLICT (batch_id) DO NOTHING

-- get_batch --
SELECT batch_id, cap, created_at, meta FROM batches WHERE batch_id = %(batch_id)s

-- batch_ids --
-- Registered batches first (in creation order), then batches only named by tasks, by their
-- first task (the kept counts of migration 6: no task row is read).
SELECT batch_id FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(first_seq) FROM (
        SELECT batch_id, n, first_seq FROM batch_counts
        UNION ALL SELECT batch_id, n, first_seq FROM batch_count_deltas
    ) AS k
    WHERE batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id HAVING sum(n) <> 0
) AS all_batches
ORDER BY src, seq

-- batch_counts --
-- Every batch with its kept counts (migration 6: folded totals and the deltas since) in one
-- snapshot, listed as batch_ids lists them (registered first, in creation order, then those
-- only named by tasks); a batch with no counts row (registered, no task yet) comes with a
-- NULL status. The fleet view asks it on every poll: a few rows per batch, no task row.
WITH k AS (
    SELECT batch_id, status, sum(n)::bigint AS n, min(first_seq) AS first_seq FROM (
        SELECT batch_id, status, n, first_seq FROM batch_counts
        UNION ALL SELECT batch_id, status, n, first_seq FROM batch_count_deltas
    ) AS u
    GROUP BY batch_id, status
)
SELECT l.batch_id, k.status, k.n FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(first_seq) FROM k
    WHERE batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id HAVING sum(n) <> 0
) AS l LEFT JOIN k ON k.batch_id = l.batch_id
ORDER BY l.src, l.seq, l.batch_id

-- batch_ids_scan --
-- A schema from before migration 6 (a watcher never migrates): the tasks name the batches.
SELECT batch_id FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(seq) FROM tasks
    WHERE batch_id IS NOT NULL AND batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id
) AS all_batches
ORDER BY src, seq

-- task_count --
SELECT count(*) FROM tasks

-- slots_ensure --
INSERT INTO fleet_slots (name, slot)
SELECT %(name)s, s FROM generate_series(0, %(limit)s - 1) AS s
ON CONFLICT (name, slot) DO NOTHING

-- slots_shrink --
DELETE FROM fleet_slots WHERE name = %(name)s AND slot >= %(limit)s

-- slot_acquire --
-- Take a free or expired slot (database clock), skipping slots another acquirer is taking.
UPDATE fleet_slots AS s SET
    holder = %(holder)s, lease_id = %(lease_id)s,
    expires_at = extract(epoch FROM clock_timestamp()) + %(lease_s)s
FROM (SELECT slot FROM fleet_slots
      WHERE name = %(name)s AND slot < %(limit)s
        AND (holder IS NULL OR expires_at < extract(epoch FROM clock_timestamp()))
      ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED) AS free
WHERE s.name = %(name)s AND s.slot = free.slot
RETURNING s.slot, s.expires_at

-- slot_renew --
UPDATE fleet_slots SET expires_at = extract(epoch FROM clock_timestamp()) + %(lease_s)s
WHERE name = %(name)s AND slot = %(slot)s AND lease_id = %(lease_id)s
  AND expires_at >= extract(epoch FROM clock_timestamp())
RETURNING expires_at

-- slot_release --
UPDATE fleet_slots SET holder = NULL, lease_id = NULL, expires_at = NULL
WHERE name = %(name)s AND slot = %(slot)s AND lease_id = %(lease_id)s

-- slots_in_use --
SELECT count(*) FROM fleet_slots
WHERE name = %(name)s AND slot < %(limit)s AND holder IS NOT NULL
  AND expires_at >= extract(epoch FROM clock_timestamp())

-- bucket_ensure --
INSERT INTO fleet_buckets (name, rate, burst, empty_at)
VALUES (%(name)s, %(rate)s, %(burst)s,
        extract(epoch FROM clock_timestamp()) - %(burst)s / %(rate)s)
ON CONFLICT (name) DO UPDATE SET rate = excluded.rate, burst = excluded.burst

-- bucket_reserve --
-- GCRA: take n tokens, going into debt if needed; answers how long the caller waits.
UPDATE fleet_buckets AS b SET
    empty_at = greatest(b.empty_at, now_.t - b.burst / b.rate) + %(n)s / b.rate
FROM (SELECT extract(epoch FROM clock_timestamp())::double precision AS t) AS now_
WHERE b.name = %(name)s
RETURNING greatest(0.0, b.empty_at - now_.t)

-- bucket_try --
-- GCRA: take n tokens only if they are there now; answers whether it did.
UPDATE fleet_buckets AS b SET
    empty_at = greatest(b.empty_at, now_.t - b.burst / b.rate) + %(n)s / b.rate
FROM (SELECT extract(epoch FROM clock_timestamp())::double precision AS t) AS now_
WHERE b.name = %(name)s
  AND greatest(b.empty_at, now_.t - b.burst / b.rate) + %(n)s / b.rate <= now_.t
RETURNING b.empty_at

-- slot_by_lease --
-- After an unsure commit: did our acquire land? The slot carries our lease id.
SELECT slot, expires_at FROM fleet_slots WHERE name = %(name)s AND lease_id = %(lease_id)s

-- batch_timed_count --
-- How many of a batch's tasks ended after running (their last attempt has a duration).
SELECT count(*) FROM tasks
WHERE batch_id = %(batch_id)s AND status IN ('SUCCESS', 'FAILED', 'TIMEOUT')
  AND started_at IS NOT NULL AND finished_at IS NOT NULL

-- batch_duration_desc --
-- The (k + 1)-th longest last-attempt duration of a batch: with k = n - ceil(0.99 n) it is
-- the nearest-rank p99 (taskfuse.core.metrics.percentile), found through tasks_batch.
SELECT finished_at - started_at AS d FROM tasks
WHERE batch_id = %(batch_id)s AND status IN ('SUCCESS', 'FAILED', 'TIMEOUT')
  AND started_at IS NOT NULL AND finished_at IS NOT NULL
ORDER BY d DESC LIMIT 1 OFFSET %(k)s

-- beat_worker --
INSERT INTO workers (worker_id, beat, beat_at)
VALUES (%(worker_id)s, %(beat)s::jsonb, %(beat_at)s)
ON CONFLICT (worker_id) DO UPDATE SET beat = excluded.beat, beat_at = excluded.beat_at

-- workers --
-- Every worker's last beat, the latest first, as one JSON array.
SELECT coalesce(json_agg(beat ORDER BY beat_at DESC), '[]'::json) FROM workers

-- cancel_batch --
-- A batch's cancel in one statement: every task of the batch in a source status of the
-- transition table's CANCEL rule (%(sources)s -> %(dst)s, bound from taskfuse.core.states)
-- moves, its version bumped, as a compare-and-set of each row would. FOR UPDATE takes each
-- row as last committed (a claim that won first is seen RUNNING, a task that ended is left
-- out), so the status answered is the one the task left. The count triggers keep the kept
-- totals exact; a worker's later move of one of them loses its version check.
WITH old AS (
    SELECT task_id, status FROM tasks
    WHERE batch_id = %(batch_id)s AND status = ANY(%(sources)s)
    ORDER BY seq
    FOR UPDATE
)
UPDATE tasks AS t SET status = %(dst)s, version = t.version + 1, finished_at = %(now)s,
    error_kind = %(error_kind)s, error_msg = %(reason)s, claim_token = NULL
FROM old WHERE t.task_id = old.task_id
RETURNING old.status, {task_t}

-- dependents_of --
-- The tasks that depend on any of these (a batch cancel's dependents, in one query).
SELECT {task_t} FROM task_deps AS d JOIN tasks AS t ON t.task_id = d.task_id
WHERE d.depends_on = ANY(%(ids)s)
ORDER BY t.seq, d.pos

-- prune_lock --
-- Retention, first statement: lock up to :n ended rows in :statuses that finished before
-- :cutoff (of :batch when given) and that no PENDING or RUNNING dependent waits for, as this
-- statement's snapshot sees it; rows another transaction holds (a submit marking a parent
-- has_children) are skipped, not waited for.
SELECT t.task_id FROM tasks AS t
WHERE t.status = ANY(%(statuses)s::text[])
  AND t.finished_at < %(cutoff)s
  AND (%(batch)s::text IS NULL OR t.batch_id = %(batch)s::text)
  AND NOT EXISTS (SELECT 1 FROM task_deps AS d JOIN tasks AS c ON c.task_id = d.task_id
                  WHERE d.depends_on = t.task_id AND c.status IN ('PENDING', 'RUNNING'))
LIMIT %(n)s
FOR UPDATE OF t SKIP LOCKED

-- prune_rows --
-- Retention, second statement: delete the locked rows that still have no live dependent,
-- asked again under this statement's own, later snapshot. A submit of a dependent locks its
-- parents (mark_parents), so it either committed before our locks (seen here: the parent
-- stays) or waits for our commit (and then finds its parent gone, as any unknown id). One
-- statement was not enough: a dependent committed between the statement's snapshot and its
-- row lock was invisible to the NOT EXISTS (a row lock re-reads the row, not the subquery),
-- and its parent went (tests/store/test_prune.py, the racing test). The count triggers keep
-- the counts; answers each deleted row's id and status. A batch of the deleted rows without
-- a record gets one (no cap, created when its first pruned task was), so a batch known only
-- by its tasks reads EMPTY once pruned whole, as a recorded batch does, not an unknown id.
WITH gone AS (
    DELETE FROM tasks AS t
    WHERE t.task_id = ANY(%(ids)s::text[])
      AND NOT EXISTS (SELECT 1 FROM task_deps AS d JOIN tasks AS c ON c.task_id = d.task_id
                      WHERE d.depends_on = t.task_id AND c.status IN ('PENDING', 'RUNNING'))
    RETURNING t.task_id, t.status, t.batch_id, t.created_at
), remembered AS (
    INSERT INTO batches (batch_id, cap, created_at)
    SELECT batch_id, NULL, min(created_at) FROM gone WHERE batch_id IS NOT NULL
    GROUP BY batch_id ORDER BY batch_id
    ON CONFLICT (batch_id) DO NOTHING
)
SELECT task_id, status FROM gone

-- prune_count --
-- What `prune_lock` would find in all, by status (a dry run).
SELECT t.status, count(*) FROM tasks AS t
WHERE t.status = ANY(%(statuses)s::text[])
  AND t.finished_at < %(cutoff)s
  AND (%(batch)s::text IS NULL OR t.batch_id = %(batch)s::text)
  AND NOT EXISTS (SELECT 1 FROM task_deps AS d JOIN tasks AS c ON c.task_id = d.task_id
                  WHERE d.depends_on = t.task_id AND c.status IN ('PENDING', 'RUNNING'))
GROUP BY t.status

-- prune_deps --
DELETE FROM task_deps WHERE task_id = ANY(%(ids)s::text[])
