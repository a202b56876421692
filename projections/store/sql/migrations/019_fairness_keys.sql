-- flow: jobs that share a fairness key take their turns at a stage type as one. No event before
-- this has a key: NULL, as the columns start, so nothing is rebuilt.
ALTER TABLE jobs_v1 ADD COLUMN fairness_key TEXT;
ALTER TABLE queue_v1 ADD COLUMN fairness_key TEXT;
CREATE INDEX IF NOT EXISTS queue_v1_fairness ON queue_v1 (stage_type, fairness_key, turn)
    WHERE fairness_key IS NOT NULL;
