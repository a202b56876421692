-- Named statements for SQLite only (store/queries.py).

-- == the inline read models' statements that are not one table's row (store/executor.py) ====

-- name: enqueue
-- Queue a task: its priority and whether it can be dequeued come from its stage and job rows.
INSERT INTO queue_v1 (task_id, job_id, stage_id, stage_type, priority_rank, seq, stage_open,
    job_open, not_before)
SELECT %(task_id)s, s.job_id, s.id, s.type, j.priority_rank, %(seq)s, s.status IN {open},
    j.status IN {open}, %(not_before)s
FROM stages_v1 s JOIN jobs_v1 j ON j.id = s.job_id WHERE s.id = %(stage_id)s;

-- name: file_event
-- The history index: file the event at a position under its aggregate's job.
INSERT INTO job_events_v1 (job_id, position)
SELECT job_id, %(position)s FROM entity_jobs_v1 WHERE entity_id = %(entity_id)s;
