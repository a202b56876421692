-- retention and archives: retention periods per job name, archive records, catch-up seeds
-- No event before this writes these tables, so nothing is rebuilt.
CREATE TABLE IF NOT EXISTS retention_v1 (
    name TEXT PRIMARY KEY,
    period_seconds BIGINT NOT NULL,
    set_by TEXT NOT NULL,
    set_time {time} NOT NULL
);
CREATE TABLE IF NOT EXISTS archives_v1 (
    job_id {uuid} PRIMARY KEY,
    name TEXT NOT NULL,
    location TEXT NOT NULL,
    checksum TEXT NOT NULL,
    events BIGINT NOT NULL,
    last_position BIGINT NOT NULL,
    ended_at {time} NOT NULL,
    archived_by TEXT NOT NULL,
    archived_at {time} NOT NULL
);
CREATE TABLE IF NOT EXISTS archive_seeds_v1 (
    projection TEXT PRIMARY KEY,
    position BIGINT NOT NULL
);
