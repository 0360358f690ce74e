-- Named queries of SQLiteStore. `{task}` stands for the task columns (sql.SELECT_TASK).
-- Status literals are written out (not bound) so SQLite can prove a partial index applies.

-- get_task --
SELECT {task} FROM tasks WHERE task_id = :task_id

-- find_tasks --
-- The task with that id first (unless it is also in the trace), then the trace in order.
SELECT {task} FROM tasks
WHERE task_id = :key OR trace_id = :key
ORDER BY (task_id = :key AND trace_id <> :key) DESC, seq

-- search_tasks --
-- The fleet view's `/`: tasks whose id, trace, kind, batch or idempotency key contains the
-- text (ASCII case folded by LIKE), newest first, at most :limit. The pattern comes escaped
-- (`like_pattern`): % and _ in the text match themselves.
SELECT {task} FROM tasks
WHERE task_id LIKE :pattern ESCAPE '\' OR trace_id LIKE :pattern ESCAPE '\'
   OR kind LIKE :pattern ESCAPE '\' OR batch_id LIKE :pattern ESCAPE '\'
   OR idempotency_key LIKE :pattern ESCAPE '\'
ORDER BY seq DESC
LIMIT :limit

-- existing_ids --
SELECT task_id FROM tasks WHERE task_id IN (SELECT value FROM json_each(:ids))

-- tasks_by_key --
SELECT {task} FROM tasks WHERE idempotency_key IN (SELECT value FROM json_each(:keys))

-- statuses_of --
SELECT task_id, status FROM tasks WHERE task_id IN (SELECT value FROM json_each(:ids))

-- next_tick --
-- Reserve :n ticks of the monotonic counter; answers the last one reserved.
UPDATE taskfuse_counter SET tick = tick + :n WHERE id = 1 RETURNING tick

-- insert_tasks --
-- New rows, many per statement: {values} is one row's placeholders (columns in the order
-- listed) repeated per row. Migration 4's insert trigger then costs its statement's set-up
-- once per group (with one statement per row it made submitting 20k tasks 18 % slower).
INSERT INTO tasks ({task}, unmet, ready_tick) VALUES {values}

-- insert_dep --
INSERT INTO task_deps (task_id, pos, depends_on) VALUES (:task_id, :pos, :depends_on)

-- swap --
-- The compare-and-set: writes the lifecycle fields only if the version is still :expected.
UPDATE tasks SET
    status = :status, version = :version, retry_count = :retry_count,
    not_before = :not_before, started_at = :started_at, finished_at = :finished_at,
    worker_id = :worker_id, result = :result, error_kind = :error_kind,
    error_msg = :error_msg, heartbeat_at = :heartbeat_at, last_delay = :last_delay,
    pending_since = :pending_since, operator_retries = :operator_retries,
    operator_retried_at = :operator_retried_at,
    ready_tick = coalesce(:ready_tick, ready_tick),
    run_tick = coalesce(:run_tick, run_tick),
    claim_token = :claim_token
WHERE task_id = :task_id AND version = :expected

-- swap_ended --
-- The compare-and-sets of many moves to an ended status (they take no tick) in one
-- statement: {values} is one move's placeholders, in the order of m's columns, per move;
-- answers the tasks whose version still matched. A statement per move paid the count
-- trigger's set-up per row (the runner drained 20k tasks in 1.16 x the time).
WITH m (task_id, expected, status, version, retry_count, not_before, started_at, finished_at,
        worker_id, result, error_kind, error_msg, heartbeat_at, last_delay, pending_since,
        operator_retries, operator_retried_at)
AS (VALUES {values})
UPDATE tasks SET
    status = m.status, version = m.version, retry_count = m.retry_count,
    not_before = m.not_before, started_at = m.started_at, finished_at = m.finished_at,
    worker_id = m.worker_id, result = m.result, error_kind = m.error_kind,
    error_msg = m.error_msg, heartbeat_at = m.heartbeat_at, last_delay = m.last_delay,
    pending_since = m.pending_since, operator_retries = m.operator_retries,
    operator_retried_at = m.operator_retried_at, claim_token = NULL
FROM m
WHERE tasks.task_id = m.task_id AND tasks.version = m.expected
RETURNING tasks.task_id

-- has_children --
SELECT 1 FROM task_deps WHERE depends_on = :parent LIMIT 1

-- parents_among --
-- Which of these tasks some task depends on (one query for a group of completions).
SELECT DISTINCT depends_on FROM task_deps
WHERE depends_on IN (SELECT value FROM json_each(:ids))

-- release_children --
-- A parent reached SUCCESS: its dependents have that many fewer unmet dependencies, and
-- those that become claimable take a fresh ready tick (ties then break by submission).
UPDATE tasks SET
    unmet = unmet - (SELECT count(*) FROM task_deps d
                     WHERE d.task_id = tasks.task_id AND d.depends_on = :parent),
    ready_tick = CASE
        WHEN status = 'PENDING'
             AND unmet = (SELECT count(*) FROM task_deps d
                          WHERE d.task_id = tasks.task_id AND d.depends_on = :parent)
        THEN :tick ELSE ready_tick END
WHERE task_id IN (SELECT task_id FROM task_deps WHERE depends_on = :parent)

-- claim_candidates --
-- Ready rows in claim order: PENDING, dependencies met, not_before passed, no blocked
-- downstream, batch under its cap. Walks tasks_ready from its head.
SELECT {task} FROM tasks AS t INDEXED BY tasks_ready
WHERE t.status = 'PENDING' AND t.unmet = 0
  AND (t.not_before IS NULL OR t.not_before <= :now)
  AND (:exclude = '[]' OR t.task_id NOT IN (SELECT value FROM json_each(:exclude)))
  AND (t.downstreams = '[]' OR :blocked = '[]' OR NOT EXISTS (
        SELECT 1 FROM json_each(t.downstreams) AS ds
        WHERE ds.value IN (SELECT value FROM json_each(:blocked))))
  AND (t.batch_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM batches AS b
        WHERE b.batch_id = t.batch_id AND b.cap IS NOT NULL
          AND b.cap <= (SELECT count(*) FROM tasks AS r
                        WHERE r.batch_id = b.batch_id AND r.status = 'RUNNING')))
ORDER BY t.priority DESC, t.ready_at, t.ready_tick, t.seq
LIMIT :n

-- claim_rows --
-- Move the picked candidates to RUNNING in one statement: the records `move` built differ
-- only in their versions; :rows is a JSON array of [task_id, expected, version], and each
-- row is still checked against the version it was read at. Run ticks follow list order.
UPDATE tasks SET
    status = 'RUNNING', version = json_extract(r.value, '$[2]'), started_at = :now,
    heartbeat_at = :now, finished_at = NULL, worker_id = :worker_id,
    run_tick = :tick + r.key, claim_token = :token
FROM json_each(:rows) AS r
WHERE tasks.task_id = json_extract(r.value, '$[0]')
  AND tasks.version = json_extract(r.value, '$[1]')

-- batch_room --
-- Free slots of the capped batches among :ids.
SELECT b.batch_id,
       b.cap - (SELECT count(*) FROM tasks AS r
                WHERE r.batch_id = b.batch_id AND r.status = 'RUNNING')
FROM batches AS b
WHERE b.batch_id IN (SELECT value FROM json_each(:ids)) AND b.cap IS NOT NULL

-- heartbeat --
-- Renew the lease of one attempt: (task_id, version) names it; any other attempt renews nothing.
UPDATE tasks SET heartbeat_at = :now
WHERE task_id = :task_id AND version = :version AND status = 'RUNNING'

-- heartbeat_many --
-- Renew many attempts' leases in one statement: :rows is a JSON array of [task_id, version];
-- only the task's current RUNNING attempt is renewed (a heartbeat never bumps the version).
UPDATE tasks SET heartbeat_at = :now
WHERE status = 'RUNNING' AND (task_id, version) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:rows))
RETURNING task_id, version

-- has_unfinished --
-- Two probes of the partial indexes of RUNNING and of PENDING rows, each stopping at its
-- first row: cheap whatever the table's size.
SELECT EXISTS (SELECT 1 FROM tasks WHERE status = 'RUNNING')
    OR EXISTS (SELECT 1 FROM tasks WHERE status = 'PENDING')

-- has_unfinished_batch --
SELECT EXISTS (SELECT 1 FROM tasks WHERE batch_id = :batch_id
                                      AND status IN ('PENDING', 'RUNNING'))

-- overdue --
SELECT {task} FROM tasks
WHERE status = 'RUNNING' AND deadline < :now
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
  AND ((:lease IS NOT NULL AND heartbeat_at IS NOT NULL AND heartbeat_at + :lease < :now)
       OR coalesce(started_at, :now) + 2 * timeout < :now)
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- running_over_limit --
-- The sweeper's third rule: an attempt beyond what max_retry allows (an impossible record).
SELECT {task} FROM tasks
WHERE status = 'RUNNING' AND retry_count > max_retry
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- waiting_since_before --
-- The sweeper's max-age rule: PENDING rows waiting since before :cutoff, from when they last
-- became PENDING or their not_before if later (Task.waiting_since), through tasks_waiting,
-- whose expression this repeats word for word (SQLite matches index expressions literally).
SELECT {task} FROM tasks
WHERE status = 'PENDING'
  AND max(coalesce(pending_since, created_at), coalesce(not_before, pending_since, created_at))
      < :cutoff
ORDER BY max(coalesce(pending_since, created_at), coalesce(not_before, pending_since, created_at)),
         seq

-- next_ready_at --
SELECT min(not_before) FROM tasks
WHERE status = 'PENDING' AND unmet = 0 AND not_before IS NOT NULL AND not_before > :now

-- dependents --
SELECT {task_t} FROM task_deps AS d JOIN tasks AS t ON t.task_id = d.task_id
WHERE d.depends_on = :task_id
ORDER BY t.seq, d.pos

-- counts --
-- Kept by the triggers of migration 4: a few rows, whatever the table's size.
SELECT status, n FROM task_counts

-- counts_scan --
-- A file from before migration 4 (a watcher never migrates): every row, counted.
SELECT status, count(*) FROM tasks GROUP BY status

-- counts_batch --
-- A batch's kept counts (migration 5).
SELECT status, n FROM batch_counts WHERE batch_id = :batch_id

-- counts_batch_scan --
-- A file from before migration 5 (a watcher never migrates): the batch's rows, counted.
SELECT status, count(*) FROM tasks WHERE batch_id = :batch_id GROUP BY status

-- batch_tasks --
SELECT {task} FROM tasks WHERE batch_id = :batch_id ORDER BY seq

-- batch_tasks_in --
SELECT {task} FROM tasks
WHERE batch_id = :batch_id AND status IN (SELECT value FROM json_each(:statuses))
ORDER BY seq

-- all_tasks --
SELECT {task} FROM tasks ORDER BY seq

-- claimed_by_token --
-- After a failed commit: did our claim land? Its rows carry the claim's token.
SELECT {task} FROM tasks WHERE claim_token = :token AND status = 'RUNNING'
ORDER BY run_tick, priority DESC, ready_at, ready_tick, seq

-- put_batch --
INSERT INTO batches (batch_id, cap, created_at, meta, seq)
VALUES (:batch_id, :cap, :created_at, :meta, :seq)
ON CONFLICT (batch_id) DO NOTHING

-- get_batch --
SELECT batch_id, cap, created_at, meta FROM batches WHERE batch_id = :batch_id

-- batch_ids --
-- Registered batches first (in creation order), then batches only named by tasks, by their
-- first task (the kept counts of migration 5: no task row is read).
SELECT batch_id FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(first_seq) FROM batch_counts
    WHERE batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id HAVING sum(n) <> 0
)
ORDER BY src, seq

-- batch_counts --
-- Every batch with its kept counts (migration 5) in one statement, listed as batch_ids lists
-- them (registered first, in creation order, then those only named by tasks); a batch with
-- no counts row (registered, no task yet) comes with a NULL status. The fleet view asks it
-- on every poll: a few rows per batch, no task row.
SELECT l.batch_id, c.status, c.n FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(first_seq) FROM batch_counts
    WHERE batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id HAVING sum(n) <> 0
) AS l LEFT JOIN batch_counts AS c ON c.batch_id = l.batch_id
ORDER BY l.src, l.seq, l.batch_id

-- batch_ids_scan --
-- A file from before migration 5 (a watcher never migrates): the tasks name the batches.
SELECT batch_id FROM (
    SELECT batch_id, 0 AS src, seq FROM batches
    UNION ALL
    SELECT batch_id, 1 AS src, min(seq) FROM tasks
    WHERE batch_id IS NOT NULL AND batch_id NOT IN (SELECT batch_id FROM batches)
    GROUP BY batch_id
)
ORDER BY src, seq

-- task_count --
SELECT count(*) FROM tasks

-- batch_timed_count --
-- How many of a batch's tasks ended after running (their last attempt has a duration).
SELECT count(*) FROM tasks
WHERE batch_id = :batch_id AND status IN ('SUCCESS', 'FAILED', 'TIMEOUT')
  AND started_at IS NOT NULL AND finished_at IS NOT NULL

-- batch_duration_desc --
-- The (:k + 1)-th longest last-attempt duration of a batch: with k = n - ceil(0.99 n) it is
-- the nearest-rank p99 (taskfuse.core.metrics.percentile), found through tasks_batch.
SELECT finished_at - started_at AS d FROM tasks
WHERE batch_id = :batch_id AND status IN ('SUCCESS', 'FAILED', 'TIMEOUT')
  AND started_at IS NOT NULL AND finished_at IS NOT NULL
ORDER BY d DESC LIMIT 1 OFFSET :k

-- beat_worker --
INSERT INTO workers (worker_id, beat, beat_at) VALUES (:worker_id, :beat, :beat_at)
ON CONFLICT (worker_id) DO UPDATE SET beat = excluded.beat, beat_at = excluded.beat_at

-- workers --
-- Every worker's last beat, the latest first, as one JSON array.
SELECT coalesce(json_group_array(json(beat)), '[]')
FROM (SELECT beat FROM workers ORDER BY beat_at DESC)

-- cancel_batch --
-- A batch's cancel in one statement per source status of the transition table's CANCEL
-- rule (:src -> :dst, bound from taskfuse.core.states): every such task of the batch, its
-- version bumped, as a compare-and-set of each row would; the count triggers keep the kept
-- totals exact. A worker's later move of one of them loses its version check.
UPDATE tasks SET status = :dst, version = version + 1, finished_at = :now,
    error_kind = :error_kind, error_msg = :reason, claim_token = NULL
WHERE batch_id = :batch_id AND status = :src
RETURNING {task}

-- dependents_of --
-- The tasks that depend on any of these (a batch cancel's dependents, in one query).
SELECT {task_t} FROM task_deps AS d JOIN tasks AS t ON t.task_id = d.task_id
WHERE d.depends_on IN (SELECT value FROM json_each(:ids))
ORDER BY t.seq, d.pos

-- prune_pick --
-- Retention: up to :n ended rows in :statuses that finished before :cutoff (of :batch when
-- given), oldest first (seq is the rowid: the walk stops at the n-th match), never one a
-- PENDING or RUNNING dependent still waits for.
SELECT t.seq, t.task_id FROM tasks AS t
WHERE t.status IN (SELECT value FROM json_each(:statuses))
  AND t.finished_at < :cutoff
  AND (:batch IS NULL OR t.batch_id = :batch)
  AND NOT EXISTS (SELECT 1 FROM task_deps AS d JOIN tasks AS c ON c.task_id = d.task_id
                  WHERE d.depends_on = t.task_id AND c.status IN ('PENDING', 'RUNNING'))
ORDER BY t.seq
LIMIT :n

-- prune_count --
-- What `prune_pick` would find in all, by status (a dry run).
SELECT t.status, count(*) FROM tasks AS t
WHERE t.status IN (SELECT value FROM json_each(:statuses))
  AND t.finished_at < :cutoff
  AND (:batch IS NULL OR t.batch_id = :batch)
  AND NOT EXISTS (SELECT 1 FROM task_deps AS d JOIN tasks AS c ON c.task_id = d.task_id
                  WHERE d.depends_on = t.task_id AND c.status IN ('PENDING', 'RUNNING'))
GROUP BY t.status

-- prune_rows --
-- Delete the picked rows (the count triggers of migrations 4 and 5 keep the counts) and
-- their own dependency rows; answers each deleted row's status, batch and submission time
-- (a batch without a record gets one: `SQLiteStore.prune`).
DELETE FROM tasks WHERE seq IN (SELECT value FROM json_each(:seqs))
RETURNING status, batch_id, created_at

-- prune_deps --
DELETE FROM task_deps WHERE task_id IN (SELECT value FROM json_each(:ids))
