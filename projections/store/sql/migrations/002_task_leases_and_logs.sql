-- task leases and logs
-- Task leases (heartbeats) and the task log. The defaults are what the projection writes
-- for events from before leases existed.

ALTER TABLE tasks_v1 ADD COLUMN lease_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN lease_expires_at {time};
CREATE INDEX IF NOT EXISTS tasks_v1_lease ON tasks_v1 (lease_expires_at)
    WHERE status = 'IN_PROGRESS';
CREATE TABLE IF NOT EXISTS task_logs_v1 (
    task_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    line_no INTEGER NOT NULL,
    job_id {uuid} NOT NULL,
    attempt INTEGER NOT NULL,
    time {time} NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (task_id, position, line_no)
);
CREATE INDEX IF NOT EXISTS task_logs_v1_job ON task_logs_v1 (job_id);
