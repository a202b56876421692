-- concurrency limits: one row per stage type whose limit was set (max_in_progress NULL once
-- removed), which the claim reads. No event before this writes it, so nothing is rebuilt.

CREATE TABLE IF NOT EXISTS concurrency_limits_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    stage_type TEXT NOT NULL UNIQUE,
    max_in_progress INTEGER,
    updated_by TEXT NOT NULL,
    reason TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL
);
