-- flow: per-key concurrency limits and fairness weights. A job's concurrency key (and its gate:
-- the key, or the job itself) and fairness weight, a stage type's per-key limit, and each queued
-- task's gate and whether it is held back by its key's limit. No event before this has a key, a
-- weight or a per-key limit: every job is its own gate of weight 1 and no task is held, so
-- nothing is rebuilt.
ALTER TABLE jobs_v1 ADD COLUMN concurrency_key TEXT;
ALTER TABLE jobs_v1 ADD COLUMN gate TEXT;
UPDATE jobs_v1 SET gate = 'j:' || CAST(id AS TEXT);
ALTER TABLE jobs_v1 ADD COLUMN fairness_weight INTEGER;
ALTER TABLE stage_type_limits_v1 ADD COLUMN max_in_progress_per_key INTEGER;
ALTER TABLE queue_v1 ADD COLUMN gate TEXT;
ALTER TABLE queue_v1 ADD COLUMN held {bool} NOT NULL DEFAULT {false};
DROP INDEX IF EXISTS queue_v1_next;
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, turn, seq)
    WHERE stage_open AND job_open AND not_before IS NULL AND NOT held;
DROP INDEX IF EXISTS queue_v1_due;
CREATE INDEX IF NOT EXISTS queue_v1_due ON queue_v1 (stage_type, not_before, seq)
    WHERE stage_open AND job_open AND not_before IS NOT NULL AND NOT held;
CREATE INDEX IF NOT EXISTS queue_v1_gate ON queue_v1 (stage_type, gate, priority_rank, turn, seq)
    WHERE gate IS NOT NULL AND stage_open AND job_open AND not_before IS NULL;
CREATE INDEX IF NOT EXISTS queue_v1_gate_due ON queue_v1 (stage_type, gate, not_before, seq)
    WHERE gate IS NOT NULL AND stage_open AND job_open AND not_before IS NOT NULL;
CREATE INDEX IF NOT EXISTS queue_v1_admitted ON queue_v1 (stage_type, gate)
    WHERE gate IS NOT NULL AND NOT held;
