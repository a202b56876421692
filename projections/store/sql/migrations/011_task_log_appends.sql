-- task logs: a row per append
-- A log append is one row, its lines a JSON array, with the actor that wrote them: an append
-- costs one row whatever its number of lines. Rows are rebuilt from the log.

CREATE TABLE IF NOT EXISTS task_logs_v2 (
    task_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    job_id {uuid} NOT NULL,
    attempt INTEGER NOT NULL,
    actor TEXT NOT NULL,
    time {time} NOT NULL,
    line_count INTEGER NOT NULL,
    lines {json} NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE INDEX IF NOT EXISTS task_logs_v2_job ON task_logs_v2 (job_id);
DROP TABLE IF EXISTS task_logs_v1;
