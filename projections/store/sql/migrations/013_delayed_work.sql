-- time: not-before times and retry policies on jobs, stages and tasks (and in the queue), deadlines
-- Every event before this has no not-before time, retry policy or deadline: NULL, as the columns
-- start, so nothing is rebuilt. The claim's ready index, and the oldest queued task's, leave
-- delayed rows out; they have an index of their own, by due time.
ALTER TABLE jobs_v1 ADD COLUMN not_before {time};
ALTER TABLE jobs_v1 ADD COLUMN retry_policy {json};
ALTER TABLE jobs_v1 ADD COLUMN deadline {time};
ALTER TABLE stages_v1 ADD COLUMN not_before {time};
ALTER TABLE stages_v1 ADD COLUMN retry_policy {json};
ALTER TABLE stages_v1 ADD COLUMN deadline {time};
ALTER TABLE tasks_v1 ADD COLUMN not_before {time};
ALTER TABLE tasks_v1 ADD COLUMN retry_policy {json};
ALTER TABLE queue_v1 ADD COLUMN not_before {time};
DROP INDEX IF EXISTS queue_v1_next;
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, seq)
    WHERE stage_open AND job_open AND not_before IS NULL;
CREATE INDEX IF NOT EXISTS queue_v1_due ON queue_v1 (stage_type, not_before, seq)
    WHERE stage_open AND job_open AND not_before IS NOT NULL;
DROP INDEX IF EXISTS queue_v1_oldest;
CREATE INDEX IF NOT EXISTS queue_v1_oldest ON queue_v1 (stage_type, seq)
    WHERE stage_open AND job_open AND not_before IS NULL;
CREATE INDEX IF NOT EXISTS jobs_v1_deadline ON jobs_v1 (deadline)
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED');
CREATE INDEX IF NOT EXISTS stages_v1_deadline ON stages_v1 (deadline)
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED');
