-- delegation, job modes, completion stages, task results
-- Delegation to child jobs, job run modes, completion stages, task results. The defaults
-- are what the projection writes for events from before them.

ALTER TABLE jobs_v1 ADD COLUMN mode TEXT NOT NULL DEFAULT 'runOnce';
ALTER TABLE jobs_v1 ADD COLUMN parent_task_id {uuid};
ALTER TABLE jobs_v1 ADD COLUMN parent_job_id {uuid};
ALTER TABLE jobs_v1 ADD COLUMN completion_stages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs_v1 ADD COLUMN finishing {bool} NOT NULL DEFAULT {false};
ALTER TABLE jobs_v1 ADD COLUMN completing {bool} NOT NULL DEFAULT {false};
ALTER TABLE jobs_v1 ADD COLUMN finish_time {time};
CREATE INDEX IF NOT EXISTS jobs_v1_parent_task ON jobs_v1 (parent_task_id);
CREATE INDEX IF NOT EXISTS jobs_v1_parent_job ON jobs_v1 (parent_job_id);
ALTER TABLE stages_v1 ADD COLUMN completion {bool} NOT NULL DEFAULT {false};
ALTER TABLE stages_v1 ADD COLUMN failure_patterns {json} NOT NULL DEFAULT '[]';
ALTER TABLE summaries_v1 ADD COLUMN delegated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN result {json};
ALTER TABLE tasks_v1 ADD COLUMN delegations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN delegated_at {time};
CREATE INDEX IF NOT EXISTS tasks_v1_delegated ON tasks_v1 (delegated_at)
    WHERE status = 'DELEGATED';
