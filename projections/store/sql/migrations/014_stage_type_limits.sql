-- stage type limits: one row per stage type whose limits were set (a concurrency limit, a rate),
-- which the claim reads, and each rate's token bucket, which claims draw from. No event before
-- this writes either, so nothing is rebuilt.

CREATE TABLE IF NOT EXISTS stage_type_limits_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    stage_type TEXT NOT NULL UNIQUE,
    max_in_progress INTEGER,
    rate_starts INTEGER,
    rate_interval_seconds INTEGER,
    updated_by TEXT NOT NULL,
    reason TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL
);
CREATE TABLE IF NOT EXISTS jobnik_rate_buckets (
    stage_type TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at DOUBLE PRECISION NOT NULL
);
