-- Named statements for both backends (store/queries.py loads them). Parameters are %(name)s;
-- a {slot} is filled in by the caller, or by the loader for {open}, {next_in_queue} and
-- {next_batch_in_queue} (the dequeue rule, inline/queue.py).

-- == the inline read models, as write and read sessions load them ============================

-- name: job_by_id
SELECT * FROM jobs_v1 WHERE id = %(id)s;

-- name: stage_by_id
SELECT * FROM stages_v1 WHERE id = %(id)s;

-- name: task_by_id
SELECT * FROM tasks_v1 WHERE id = %(id)s;

-- name: token_by_id
SELECT * FROM tokens_v1 WHERE id = %(id)s;

-- name: claim_task
-- The next dequeueable task of a stage type: priority, then queue order.
SELECT * FROM tasks_v1 t WHERE t.id = ({next_in_queue});

-- name: claim_tasks
-- The next %(n)s dequeueable tasks of a stage type, in `claim_task`'s order.
SELECT t.* FROM tasks_v1 t JOIN queue_v1 q ON q.task_id = t.id
WHERE t.id IN ({next_batch_in_queue}) ORDER BY q.priority_rank, q.turn, q.seq;

-- name: queue_turns
-- What the turns of a stage's tasks queued now depend on (domain/turns.py): its type's queue
-- order, the first and last turns ready to dequeue at its job's priority (probes of
-- queue_v1_next), its own queued tasks' lowest turn (of queue_v1_stage), the highest of its
-- own or, when its job has a fairness key, of that key's at its type (queue_v1_fairness), its
-- job's fairness weight, and how many of its own (or its key's) hold that highest turn (at most
-- the weight's worth are counted).
SELECT t.queue_order, t.head, t.tail, t.first, t.last, t.weight,
    (SELECT count(*) FROM (SELECT 1 FROM queue_v1 q WHERE t.fkey IS NULL AND q.stage_id = t.sid
        AND q.turn = t.last LIMIT 100) c)
    + (SELECT count(*) FROM (SELECT 1 FROM queue_v1 q WHERE t.fkey IS NOT NULL
        AND q.stage_type = t.stype AND q.fairness_key = t.fkey AND q.turn = t.last LIMIT 100) k)
    AS at_last
FROM (SELECT l.queue_order, s.id AS sid, s.type AS stype, j.fairness_key AS fkey,
    COALESCE(j.fairness_weight, 1) AS weight,
    (SELECT q.turn FROM queue_v1 q WHERE q.stage_type = s.type
        AND q.priority_rank = j.priority_rank AND q.stage_open AND q.job_open
        AND q.not_before IS NULL ORDER BY q.turn LIMIT 1) AS head,
    (SELECT q.turn FROM queue_v1 q WHERE q.stage_type = s.type
        AND q.priority_rank = j.priority_rank AND q.stage_open AND q.job_open
        AND q.not_before IS NULL ORDER BY q.turn DESC LIMIT 1) AS tail,
    (SELECT q.turn FROM queue_v1 q WHERE q.stage_id = s.id ORDER BY q.turn LIMIT 1) AS first,
    CASE WHEN j.fairness_key IS NULL
        THEN (SELECT q.turn FROM queue_v1 q WHERE q.stage_id = s.id ORDER BY q.turn DESC LIMIT 1)
        ELSE (SELECT q.turn FROM queue_v1 q WHERE q.stage_type = s.type
            AND q.fairness_key = j.fairness_key ORDER BY q.turn DESC LIMIT 1) END AS last
FROM stages_v1 s JOIN jobs_v1 j ON j.id = s.job_id
    LEFT JOIN stage_type_limits_v1 l ON l.stage_type = s.type
WHERE s.id = %(id)s) t;

-- name: stage_at
SELECT * FROM stages_v1 WHERE job_id = %(job_id)s AND stage_order = %(o)s;

-- name: stages_of_job
SELECT * FROM stages_v1 WHERE job_id = %(job_id)s ORDER BY stage_order;

-- name: queued_tasks_of_job
-- The job's tasks waiting for a worker or for their child jobs.
SELECT * FROM tasks_v1 WHERE job_id = %(job_id)s
    AND status IN ('PENDING', 'RETRIED', 'DELEGATED') ORDER BY creation_time, id;

-- name: tasks_of_stage_in
-- {statuses}: the placeholders of the statuses wanted.
SELECT * FROM tasks_v1 WHERE stage_id = %(stage_id)s AND status IN ({statuses})
    ORDER BY creation_time, id;

-- name: count_jobs_of_parent_task
SELECT count(*) AS n, sum(CASE WHEN status IN ('COMPLETED', 'FAILED', 'ABORTED') THEN 0 ELSE 1 END)
    AS running
FROM jobs_v1 WHERE parent_task_id = %(t)s;

-- name: open_child_jobs
SELECT * FROM jobs_v1 WHERE parent_job_id = %(j)s
    AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED') ORDER BY creation_time, id;

-- name: stale_delegations
-- DELEGATED tasks since before %(before)s whose child jobs have all ended.
SELECT * FROM tasks_v1 t WHERE status = 'DELEGATED' AND delegated_at < %(before)s
    AND NOT EXISTS (SELECT 1 FROM jobs_v1 j WHERE j.parent_task_id = t.id
        AND j.status NOT IN ('COMPLETED', 'FAILED', 'ABORTED'))
    ORDER BY delegated_at LIMIT %(limit)s;

-- name: summary_of_stage
SELECT * FROM summaries_v1 WHERE stage_id = %(s)s;

-- name: missed_deadlines
-- Unfinished jobs and stages whose deadline passed before %(now)s, earliest first (a probe of
-- jobs_v1_deadline and one of stages_v1_deadline); stage_id: NULL for a job's own deadline.
SELECT job_id, stage_id FROM (
    SELECT id AS job_id, NULL AS stage_id, deadline FROM jobs_v1
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED')
        AND deadline < %(now)s
    UNION ALL
    SELECT job_id, id AS stage_id, deadline FROM stages_v1
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED')
        AND deadline < %(now)s
) d ORDER BY deadline LIMIT %(limit)s;

-- name: expired_queued
-- Queued tasks whose schedule-to-start limit ran out by %(now)s, earliest first (a probe of
-- queue_v1_expiry: a row has an expiry only while it can be dequeued).
SELECT t.* FROM (SELECT task_id, expires_at FROM queue_v1
    WHERE expires_at IS NOT NULL AND expires_at <= %(now)s ORDER BY expires_at LIMIT %(limit)s) q
JOIN tasks_v1 t ON t.id = q.task_id ORDER BY q.expires_at;

-- name: expired_leases
SELECT * FROM tasks_v1 WHERE status = 'IN_PROGRESS' AND lease_expires_at < %(now)s
    ORDER BY lease_expires_at LIMIT %(limit)s;

-- == what operators watch: counts for metrics, queues, stuck work (queries/operations.py) ====
-- Each reads summaries and small tables, never the tasks table in full: its cost grows with
-- the number of jobs, stages and stage types, not with the number of tasks.

-- name: jobs_by_status
SELECT status, COUNT(*) AS n FROM jobs_v1 GROUP BY status;

-- name: stages_by_status
SELECT type AS stage_type, status, COUNT(*) AS n FROM stages_v1 GROUP BY type, status;

-- name: tasks_by_type_and_priority
-- Every stage's task summary, summed by stage type and job priority.
SELECT s.type AS stage_type, j.priority, SUM(m.created) AS created, SUM(m.pending) AS pending,
    SUM(m.in_progress) AS in_progress, SUM(m.completed) AS completed, SUM(m.failed) AS failed,
    SUM(m.retried) AS retried, SUM(m.aborted) AS aborted, SUM(m.delegated) AS delegated,
    SUM(m.total) AS total
FROM summaries_v1 m JOIN stages_v1 s ON s.id = m.stage_id JOIN jobs_v1 j ON j.id = m.job_id
GROUP BY s.type, j.priority;

-- name: oldest_queued
-- Per stage type, the dequeueable task queued first (one probe of queue_v1_oldest) and when it
-- was queued (its latest change). Delayed tasks (a not-before time) wait for their time, not
-- for a worker: they are left out.
SELECT k.type AS stage_type, t.update_time
FROM (SELECT DISTINCT type FROM stages_v1) k JOIN tasks_v1 t ON t.id = (
    SELECT q.task_id FROM queue_v1 q WHERE q.stage_type = k.type AND q.stage_open AND q.job_open
        AND q.not_before IS NULL
    ORDER BY q.seq LIMIT 1);

-- name: delayed_by_type
-- Per stage type, its queued tasks waiting for their not-before time (a delay, a retry's
-- backoff) at %(now)s: one range of queue_v1_due each, as long as the type's delayed tasks.
SELECT k.type AS stage_type, (
    SELECT count(*) FROM queue_v1 q WHERE q.stage_type = k.type AND q.not_before > %(now)s
) AS delayed
FROM (SELECT DISTINCT type FROM stages_v1) k;

-- name: operations_by_type
SELECT * FROM operations_v1_types;

-- name: events_by_type
SELECT event_type, appended FROM operations_v1_events;

-- name: failures_by_cause
SELECT subject, cause, n FROM operations_v1_failures;

-- name: stuck_leases
-- Unfinished tasks whose lease expired more than %(n)s times.
SELECT l.task_id, l.expiries, l.last_expired_at AS since, s.job_id, s.stage_id, s.stage_type
FROM operations_v1_leases l JOIN operations_v1_stages s ON s.stage_id = l.stage_id
    JOIN tasks_v1 t ON t.id = l.task_id
WHERE l.expiries > %(n)s AND t.status NOT IN ('COMPLETED', 'FAILED', 'ABORTED')
ORDER BY l.last_expired_at LIMIT %(limit)s;

-- name: stuck_delegations
-- DELEGATED tasks whose child jobs have all ended; since: the last one's end.
SELECT t.id AS task_id, t.job_id, t.stage_id, t.stage_type, t.delegated_at,
    MAX(c.end_time) AS since, COUNT(*) AS children
FROM tasks_v1 t JOIN jobs_v1 c ON c.parent_task_id = t.id
WHERE t.status = 'DELEGATED'
GROUP BY t.id, t.job_id, t.stage_id, t.stage_type, t.delegated_at
HAVING SUM(CASE WHEN c.status IN ('COMPLETED', 'FAILED', 'ABORTED') THEN 0 ELSE 1 END) = 0
ORDER BY t.delegated_at LIMIT %(limit)s;

-- name: idle_jobs
-- Unfinished jobs with no event since before %(before)s, no task in progress and no queued task
-- waiting for its not-before time (after %(now)s): such a job is waiting, not stuck.
SELECT o.job_id, o.last_event_at AS since, j.status
FROM operations_v1_jobs o JOIN jobs_v1 j ON j.id = o.job_id
WHERE o.open AND o.last_event_at < %(before)s
    AND NOT EXISTS (SELECT 1 FROM summaries_v1 m WHERE m.job_id = o.job_id AND m.in_progress > 0)
    AND NOT EXISTS (SELECT 1 FROM queue_v1 q WHERE q.job_id = o.job_id AND q.not_before > %(now)s)
ORDER BY o.last_event_at LIMIT %(limit)s;

-- == schedules ==================================================================================

-- name: schedule_by_id
SELECT * FROM schedules_v1 WHERE id = %(id)s;

-- name: retention_names_besides
-- The job names with a retention period of their own, one aside (their number is bounded).
SELECT count(*) AS n FROM retention_v1 WHERE name <> %(n)s;

-- name: schedule_by_name
SELECT id FROM schedules_v1 WHERE name = %(n)s;

-- name: schedule_run_at
-- The fire key: the job of a schedule's run for a nominal time.
SELECT job_id FROM schedule_fires_v1 WHERE schedule_id = %(s)s AND nominal_time = %(t)s;

-- name: due_schedules
-- Schedules whose clock has something to do at %(now)s: a nominal time due, or a fire waiting
-- for the previous run to end.
SELECT id FROM schedules_v1 WHERE NOT paused
    AND (next_fire_at <= %(now)s OR buffered_time IS NOT NULL)
    ORDER BY next_fire_at, id LIMIT %(limit)s;

-- name: count_schedules
-- {where}: the filter (a name, or 1 = 1).
SELECT count(*) AS n FROM schedules_v1 s WHERE {where};

-- name: schedule_views
-- Schedules with their last run's job status (archived_job: its archive record's job) and their
-- runs' outcomes; {where}: the filter.
SELECT s.*, j.status AS last_job_status, a.job_id AS archived_job, o.completed AS o_completed,
    o.failed AS o_failed, o.aborted AS o_aborted, o.failing AS o_failing
FROM schedules_v1 s LEFT JOIN jobs_v1 j ON j.id = s.last_job_id
    LEFT JOIN archives_v2 a ON a.job_id = s.last_job_id
    LEFT JOIN schedule_outcomes_v1 o ON o.schedule_id = s.id
WHERE {where} ORDER BY s.name LIMIT %(limit)s OFFSET %(offset)s;

-- name: schedule_runs
-- A schedule's runs, latest nominal time first, with their jobs' status (live, else the last
-- known; archived_job: the job's archive record's); {before}: the page's bound (or 1 = 1).
SELECT f.nominal_time, f.started_by, f.fired_at, f.job_id, j.status AS job_status,
    r.status AS run_status, a.job_id AS archived_job
FROM schedule_fires_v1 f LEFT JOIN jobs_v1 j ON j.id = f.job_id
    LEFT JOIN schedule_runs_v1 r ON r.job_id = f.job_id
    LEFT JOIN archives_v2 a ON a.job_id = f.job_id
WHERE f.schedule_id = %(s)s AND {before} ORDER BY f.nominal_time DESC LIMIT %(limit)s;

-- name: failing_schedules
-- Schedules whose latest %(k)s or more ended runs failed in a row, longest failing first.
SELECT s.id, s.name, o.failing, o.failing_since, o.last_failed_job_id
FROM schedule_outcomes_v1 o JOIN schedules_v1 s ON s.id = o.schedule_id
WHERE o.failing >= %(k)s ORDER BY o.failing_since, s.id LIMIT %(limit)s;

-- name: schedule_counters
SELECT name, fired, skipped, missed FROM schedules_v1 ORDER BY name;

-- == concurrency limits (store/limits.py) =====================================================

-- name: limit_by_id
SELECT * FROM stage_type_limits_v1 WHERE id = %(id)s;

-- name: limit_views
-- Stage types' limits, by stage type, each with its use: the type's tasks IN_PROGRESS (counted
-- on an index), its queued ones (PENDING or RETRIED, from its stages' summaries), those a per-key
-- limit holds back (the range of its gates' rows: as long as the type's keyed queue) and the
-- tokens in its rate's bucket now; {where}: the filter (a stage type, or those in force).
SELECT l.stage_type, l.max_in_progress, l.rate_starts, l.rate_interval_seconds, l.queue_order,
    l.max_in_progress_per_key, l.key_rate_starts, l.key_rate_interval_seconds, l.updated_by, l.reason, l.creation_time, l.update_time,
    (SELECT count(*) FROM queue_v1 q WHERE q.stage_type = l.stage_type AND q.gate IS NOT NULL
        AND q.held AND q.stage_open AND q.job_open) AS held_by_key,
    (SELECT count(*) FROM tasks_v1 t WHERE t.stage_type = l.stage_type
        AND t.status = 'IN_PROGRESS') AS in_progress,
    (SELECT COALESCE(SUM(m.pending + m.retried), 0) FROM stages_v1 s
        JOIN summaries_v1 m ON m.stage_id = s.id WHERE s.type = l.stage_type) AS queued,
    (SELECT {tokens} FROM jobnik_buckets b WHERE b.stage_type = l.stage_type AND b.gate = '')
        AS tokens
FROM stage_type_limits_v1 l
WHERE {where}
ORDER BY l.stage_type LIMIT %(limit)s OFFSET %(offset)s;

-- name: limited_types_besides
-- The stage types with a limit in force, one aside (their number is bounded).
SELECT count(*) AS n FROM stage_type_limits_v1 l WHERE {in_force} AND stage_type <> %(t)s;

-- name: count_limits
SELECT count(*) AS n FROM stage_type_limits_v1 l WHERE {in_force};

-- name: spend_tokens
-- After a claim of %(k)s tasks of stage type %(v)s, of jobs %(j)s (with their counts): the
-- tokens leave its rate's bucket and its keys' (inline/limits.py: `spend`).
{spend};

-- name: due_gates
-- The keys of stage type %(v)s whose buckets gained a whole token since a claim drew from them,
-- the longest waiting first, at most %(n)s: a claim that finds fewer tasks than it asks lets
-- their held tasks through first (inline/gates.py).
SELECT gate AS g FROM jobnik_buckets WHERE stage_type = %(v)s AND wake_at <= {now}
ORDER BY wake_at LIMIT %(n)s;

-- name: wake_later
-- Those keys' buckets ({gates}: which) next gain a whole token then (NULL: full).
UPDATE jobnik_buckets AS b SET wake_at = (SELECT {key_wake} FROM stage_type_limits_v1 l
    WHERE l.stage_type = b.stage_type)
WHERE b.stage_type = %(v)s AND {gates};

-- name: drop_full_buckets
-- A full key's bucket is as none: it goes.
DELETE FROM jobnik_buckets WHERE stage_type = %(v)s AND {gates} AND wake_at IS NULL;
