-- Named statements for PostgreSQL only (store/postgres.py, store/queries.py).

-- == write sessions ==========================================================================

-- name: writing
-- Taken first by every write session, shared: a rebuild's swap (`swapping`) waits for the
-- sessions under way and holds new ones off until it commits (see store/postgres.py). The
-- session's statements find their rows by key or stage type, so each prepared one keeps its
-- generic plan: PostgreSQL would otherwise plan a read ahead again at every run (a custom plan
-- costs about half a millisecond, the generic one's checks a tenth of that).
SELECT pg_advisory_xact_lock_shared(1785684590),
    set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: swapping
SELECT pg_advisory_xact_lock(1785684590);

-- name: lock_writers
-- The writer lock: the event table's, which the library's recorder needs anyway to keep
-- notification ids in commit order.
LOCK TABLE {events} IN EXCLUSIVE MODE;

-- name: read_ahead_task
-- A task with its stage's, job's and stage summary's rows: what a worker's command loads.
SELECT to_jsonb(t) AS task, s.id AS stage_id, to_jsonb(s) AS stage, j.id AS job_id,
    to_jsonb(j) AS job, to_jsonb(sm) AS summary
FROM tasks_v1 t JOIN stages_v1 s ON s.id = t.stage_id JOIN jobs_v1 j ON j.id = t.job_id
    LEFT JOIN summaries_v1 sm ON sm.stage_id = s.id
WHERE t.id = %(v)s::uuid;

-- name: read_ahead_tasks
-- `read_ahead_task` for several tasks (an array of ids); the stage's, job's and summary's rows
-- with one task of each stage only (as `read_ahead_claims`).
SELECT to_jsonb(t) - 'first' AS task, s.id AS stage_id,
    CASE WHEN t.first THEN to_jsonb(s) END AS stage, j.id AS job_id,
    CASE WHEN t.first THEN to_jsonb(j) END AS job,
    CASE WHEN t.first THEN to_jsonb(sm) END AS summary
FROM (SELECT *, row_number() OVER (PARTITION BY stage_id) = 1 AS first FROM tasks_v1
    WHERE id = ANY(%(v)s::uuid[])) t
JOIN stages_v1 s ON s.id = t.stage_id JOIN jobs_v1 j ON j.id = t.job_id
    LEFT JOIN summaries_v1 sm ON sm.stage_id = s.id;

-- name: read_ahead_claim
-- `read_ahead_task` for the next dequeueable task of a stage type, its queue row locked.
SELECT to_jsonb(t) AS task, s.id AS stage_id, to_jsonb(s) AS stage, j.id AS job_id,
    to_jsonb(j) AS job, to_jsonb(sm) AS summary
FROM tasks_v1 t JOIN stages_v1 s ON s.id = t.stage_id JOIN jobs_v1 j ON j.id = t.job_id
    LEFT JOIN summaries_v1 sm ON sm.stage_id = s.id
WHERE t.id = ({next_in_queue_locked});

-- name: read_ahead_claims
-- `read_ahead_claim` for the next %(n)s dequeueable tasks of a stage type, in its order. The
-- stage's, job's and summary's rows come with the stage's first task only (`first`): they are
-- the same for its other tasks, and rendering them is most of the statement's cost.
SELECT to_jsonb(t) AS task, s.id AS stage_id, CASE WHEN c.first THEN to_jsonb(s) END AS stage,
    j.id AS job_id, CASE WHEN c.first THEN to_jsonb(j) END AS job,
    CASE WHEN c.first THEN to_jsonb(sm) END AS summary
FROM (SELECT q.task_id, q.priority_rank, q.turn, q.seq,
        row_number() OVER (PARTITION BY q.stage_id ORDER BY q.priority_rank, q.turn, q.seq) = 1
        AS first
    FROM queue_v1 q WHERE q.task_id IN ({next_batch_in_queue_locked})) c
JOIN tasks_v1 t ON t.id = c.task_id JOIN stages_v1 s ON s.id = t.stage_id
    JOIN jobs_v1 j ON j.id = t.job_id LEFT JOIN summaries_v1 sm ON sm.stage_id = s.id
ORDER BY c.priority_rank, c.turn, c.seq;

-- name: hold_queue
-- Lock the queue rows of jobs and of their child jobs at any depth, in one order: two commands
-- holding some of the same rows take them in the same order, whatever jobs they name.
WITH RECURSIVE tree(id) AS (
    SELECT unnest(%(j)s::uuid[]) UNION ALL SELECT c.id FROM jobs_v1 c JOIN tree ON c.parent_job_id = tree.id
)
SELECT count(*) FROM (
    SELECT 1 FROM queue_v1 WHERE job_id IN (SELECT id FROM tree) ORDER BY task_id FOR UPDATE
) held;

-- name: append
-- The writer lock, with the checks and settings that come with it, then the events; the last
-- one's log position (migration 010).
SELECT jobnik_append(%(seen)s::json, %(events)s::json) AS last;

-- name: assert_summary_fresh
-- Stage completions predicted before the writer lock still hold: completed - total equals
-- each of %(yes)s (predicted complete) and none of %(no)s (predicted not), each offset being
-- what the session's saves after that prediction added to completed - total.
SELECT jobnik_assert_fresh((EXISTS (SELECT FROM summaries_v1 WHERE stage_id = %(s)s::uuid
    AND completed - total <> ALL(%(no)s::bigint[])
    AND completed - total = ALL(%(yes)s::bigint[])))::int, 1);

-- name: settle_claim
-- After a claim of %(k)s tasks of stage type %(v)s, of jobs %(j)s (%(c)s tasks each), under the
-- writer lock: the tokens leave its rate's bucket and its keys' (`spend_tokens`), none below 0,
-- and its tasks IN_PROGRESS, this session's
-- claims included, are within its concurrency limit, and the keys of the claimed tasks' jobs
-- (%(j)s) within its per-key limit
-- (each only if the type has one: a claim may take a row a concurrent `Gate` would have held).
WITH spent AS ({spend} RETURNING tokens)
SELECT jobnik_assert_fresh((NOT EXISTS (SELECT FROM spent WHERE tokens < -0.000001)
    AND NOT EXISTS (SELECT FROM stage_type_limits_v1 l
        WHERE l.stage_type = %(v)s AND l.max_in_progress < (SELECT count(*) FROM tasks_v1 t
            WHERE t.stage_type = %(v)s AND t.status = 'IN_PROGRESS'))
    AND NOT EXISTS (SELECT FROM stage_type_limits_v1 l
        WHERE l.stage_type = %(v)s AND l.max_in_progress_per_key IS NOT NULL
        AND EXISTS (SELECT FROM tasks_v1 t JOIN jobs_v1 j ON j.id = t.job_id
            WHERE t.stage_type = %(v)s AND t.status = 'IN_PROGRESS'
            AND j.gate IN (SELECT c.gate FROM jobs_v1 c WHERE c.id = ANY(%(j)s::uuid[]))
            GROUP BY j.gate HAVING count(*) > l.max_in_progress_per_key)))::int, 1);

-- name: migrating
SELECT pg_advisory_lock(%(key)s);

-- name: migrated
SELECT pg_advisory_unlock(%(key)s);

-- == space: what removed rows leave behind (store/postgres.py's `reclaim_space`) =============

-- name: own_tables
-- jobnik's tables: those of the connection's schema.
SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename;

-- name: vacuum
-- Plain (not FULL): the table stays readable and writable, and the space of its removed rows
-- and of the index pages they emptied becomes free for its next inserts. SKIP_LOCKED: a table
-- whose lock another holds (a rebuild's swap, another VACUUM) is passed over, not waited for.
VACUUM (SKIP_LOCKED) {table};

-- name: end_a_transaction
-- A transaction that takes an id and ends: its id is handed out after every page the first pass
-- emptied (see `emptied_pages_free`).
SELECT pg_current_xact_id() AS xid;

-- name: emptied_pages_free
-- Whether every transaction (of any database) running when `xid` was handed out has ended. A
-- B-tree page a VACUUM empties is free for reuse only then (no snapshot can still reach it); on
-- a quiet database no transaction ends after the pass, so only a later VACUUM would free it.
SELECT pg_snapshot_xmin(pg_current_snapshot()) > %(xid)s::xid8 AS free;

-- == the inline read models' statements that are not one table's row (store/executor.py) ====
-- A log position is `jobnik_position(...)`: a write session names it relative to the last
-- event it inserted.

-- name: enqueue
-- Queue a task: its priority, whether it can be dequeued and its schedule-to-start limit come
-- from its stage and job rows; its expiry as inline/queue.py's `expiry` works it out. A task of
-- a type with a per-key limit gets its job's gate, held until its gate admits it (the command's
-- `Gate`, inline/gates.py).
-- VALUES: a batch of tasks becomes one statement.
INSERT INTO queue_v1 (task_id, job_id, stage_id, stage_type, priority_rank, turn, seq,
    stage_open, job_open, not_before, expire_seconds, expires_at, fairness_key, gate, held)
SELECT v.task_id, s.job_id, s.id, s.type, j.priority_rank, v.turn, jobnik_position(v.seq),
    s.status IN {open},
    j.status IN {open}, v.not_before, s.schedule_to_start_seconds,
    CASE WHEN s.status IN {open} AND j.status IN {open} THEN {expiry} END, j.fairness_key,
    CASE WHEN {keyed} THEN j.gate END, {keyed}
FROM (VALUES (%(task_id)s::uuid, %(stage_id)s::uuid, %(seq)s::bigint, %(time)s::timestamptz,
    %(not_before)s::timestamptz, %(turn)s::bigint))
    AS v(task_id, stage_id, seq, time, not_before, turn)
JOIN stages_v1 s ON s.id = v.stage_id JOIN jobs_v1 j ON j.id = s.job_id;

-- name: file_event
-- The history index: file the event at a position under its aggregate's job.
INSERT INTO job_events_v1 (job_id, position)
SELECT e.job_id, jobnik_position(v.position)
FROM (VALUES (%(entity_id)s::uuid, %(position)s::bigint)) AS v(entity_id, position)
JOIN entity_jobs_v1 e ON e.entity_id = v.entity_id;
