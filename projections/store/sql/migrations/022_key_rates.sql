-- flow: per-key rate limits. A stage type's per-key rate, and the rate buckets kept by stage type
-- and gate ('' for the type's own rate, a concurrency key's gate for its key's), each with when it
-- next gains a whole token. No event before this sets a per-key rate: nothing is rebuilt.
ALTER TABLE stage_type_limits_v1 ADD COLUMN key_rate_starts INTEGER;
ALTER TABLE stage_type_limits_v1 ADD COLUMN key_rate_interval_seconds INTEGER;
CREATE TABLE IF NOT EXISTS jobnik_buckets (
    stage_type TEXT NOT NULL,
    gate TEXT NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at DOUBLE PRECISION NOT NULL,
    wake_at DOUBLE PRECISION,
    PRIMARY KEY (stage_type, gate)
);
INSERT INTO jobnik_buckets (stage_type, gate, tokens, refilled_at)
    SELECT stage_type, '', tokens, refilled_at FROM jobnik_rate_buckets;
DROP TABLE jobnik_rate_buckets;
CREATE INDEX IF NOT EXISTS jobnik_buckets_wake ON jobnik_buckets (stage_type, wake_at)
    WHERE wake_at IS NOT NULL;
