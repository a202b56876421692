-- inline read models v1
-- Jobs, stages, their task summaries, tasks and the dequeue queue.

CREATE TABLE IF NOT EXISTS jobs_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL,
    data {json} NOT NULL,
    priority TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    percentage INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    started {bool} NOT NULL,
    stage_count INTEGER NOT NULL,
    completed_stages INTEGER NOT NULL,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time}
);
CREATE INDEX IF NOT EXISTS jobs_v1_name ON jobs_v1 (name);
CREATE INDEX IF NOT EXISTS jobs_v1_creation_time ON jobs_v1 (creation_time);
CREATE TABLE IF NOT EXISTS stages_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    job_id {uuid} NOT NULL,
    stage_order INTEGER NOT NULL,
    type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time},
    UNIQUE (job_id, stage_order)
);
CREATE INDEX IF NOT EXISTS stages_v1_type ON stages_v1 (type);
CREATE TABLE IF NOT EXISTS summaries_v1 (
    stage_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0,
    in_progress INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    created INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    aborted INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS summaries_v1_job ON summaries_v1 (job_id);
CREATE TABLE IF NOT EXISTS tasks_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    stage_id {uuid} NOT NULL,
    job_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time}
);
CREATE INDEX IF NOT EXISTS tasks_v1_stage ON tasks_v1 (stage_id);
CREATE INDEX IF NOT EXISTS tasks_v1_job_status ON tasks_v1 (job_id, status);
CREATE INDEX IF NOT EXISTS tasks_v1_type_status ON tasks_v1 (stage_type, status);
CREATE TABLE IF NOT EXISTS queue_v1 (
    task_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    stage_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    seq BIGINT NOT NULL,
    stage_open {bool} NOT NULL,
    job_open {bool} NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, seq)
    WHERE stage_open AND job_open;
CREATE INDEX IF NOT EXISTS queue_v1_job ON queue_v1 (job_id);
CREATE INDEX IF NOT EXISTS queue_v1_stage ON queue_v1 (stage_id);
