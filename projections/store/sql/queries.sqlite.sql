-- Named statements for SQLite only (store/queries.py).

-- == the inline read models' statements that are not one table's row (store/executor.py) ====

-- name: enqueue
-- Queue a task: its priority, whether it can be dequeued and its schedule-to-start limit come
-- from its stage and job rows; its expiry as inline/queue.py's `expiry` works it out. A task of
-- a type with a per-key limit gets its job's gate, held until its gate admits it (the command's
-- `Gate`, inline/gates.py).
INSERT INTO queue_v1 (task_id, job_id, stage_id, stage_type, priority_rank, turn, seq,
    stage_open, job_open, not_before, expire_seconds, expires_at, fairness_key, gate, held)
SELECT %(task_id)s, s.job_id, s.id, s.type, j.priority_rank, %(turn)s, %(seq)s,
    s.status IN {open},
    j.status IN {open}, v.not_before, s.schedule_to_start_seconds,
    CASE WHEN s.status IN {open} AND j.status IN {open} THEN {expiry} END, j.fairness_key,
    CASE WHEN {keyed} THEN j.gate END, {keyed}
FROM (SELECT %(time)s AS time, %(not_before)s AS not_before) v
JOIN stages_v1 s ON s.id = %(stage_id)s JOIN jobs_v1 j ON j.id = s.job_id;

-- name: file_event
-- The history index: file the event at a position under its aggregate's job.
INSERT INTO job_events_v1 (job_id, position)
SELECT job_id, %(position)s FROM entity_jobs_v1 WHERE entity_id = %(entity_id)s;
