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
WHERE t.id IN ({next_batch_in_queue}) ORDER BY q.priority_rank, q.seq;

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

-- name: jobs_of_parent_task
SELECT * FROM jobs_v1 WHERE parent_task_id = %(t)s ORDER BY creation_time, id;

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

-- name: expired_leases
SELECT * FROM tasks_v1 WHERE status = 'IN_PROGRESS' AND lease_expires_at < %(now)s
    ORDER BY lease_expires_at LIMIT %(limit)s;
