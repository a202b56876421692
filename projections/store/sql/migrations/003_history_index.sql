-- history index
-- The history index: which job each event belongs to, kept when the job is deleted.

CREATE TABLE IF NOT EXISTS entity_jobs_v1 (
    entity_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    kind TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_events_v1 (
    job_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    PRIMARY KEY (job_id, position)
);
