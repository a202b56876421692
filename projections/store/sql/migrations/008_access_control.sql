-- access control: tokens, the holder of a task's attempt
-- The tokens read model, and the token that holds a task's current attempt. Rows from before
-- equal what the projection writes for their events (no token events; attempts opened with
-- access control off belong to no token), so nothing is rebuilt.

CREATE TABLE IF NOT EXISTS tokens_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    stage_types {json} NOT NULL,
    expires_at {time},
    secret_hash TEXT NOT NULL,
    issued_at {time} NOT NULL,
    issued_by TEXT NOT NULL,
    update_time {time} NOT NULL,
    revoked_at {time},
    revoked_by TEXT
);
ALTER TABLE tasks_v1 ADD COLUMN holder TEXT;
