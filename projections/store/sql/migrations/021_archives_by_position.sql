-- retention: an archived job's row names the log position of its archive record, which holds the
-- rest, instead of copying it; its file and checksum are kept only once an erasure rewrote them.
-- The rows are rebuilt from the records in the log.
CREATE TABLE IF NOT EXISTS archives_v2 (
    job_id {uuid} PRIMARY KEY,
    position BIGINT NOT NULL,
    location TEXT,
    checksum TEXT
);
CREATE INDEX IF NOT EXISTS archives_v2_position ON archives_v2 (position);
DROP TABLE IF EXISTS archives_v1;
