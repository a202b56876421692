-- time: a stage's schedule-to-start limit (a job's default for its stages), and the queue's expiry
-- No event before this has a limit: NULL, as the columns start, so nothing is rebuilt.
ALTER TABLE jobs_v1 ADD COLUMN schedule_to_start_seconds INTEGER;
ALTER TABLE stages_v1 ADD COLUMN schedule_to_start_seconds INTEGER;
ALTER TABLE queue_v1 ADD COLUMN expire_seconds INTEGER;
ALTER TABLE queue_v1 ADD COLUMN expires_at {time};
CREATE INDEX IF NOT EXISTS queue_v1_expiry ON queue_v1 (expires_at) WHERE expires_at IS NOT NULL;
