-- flow: fair turns between jobs. A queued task's turn orders a stage type's queue after its
-- priority and before its log position; a stage type's limits gain its queue order. No event
-- before this has a turn or an order: 0 and 'fifo', as the columns start, so nothing is rebuilt.
ALTER TABLE queue_v1 ADD COLUMN turn BIGINT NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS queue_v1_next;
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, turn, seq)
    WHERE stage_open AND job_open AND not_before IS NULL;
DROP INDEX IF EXISTS queue_v1_stage;
CREATE INDEX IF NOT EXISTS queue_v1_stage ON queue_v1 (stage_id, turn);
ALTER TABLE stage_type_limits_v1 ADD COLUMN queue_order TEXT NOT NULL DEFAULT 'fifo';
