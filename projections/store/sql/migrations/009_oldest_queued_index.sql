-- oldest queued task per stage type
-- The dequeueable tasks of a stage type in queue order, whatever their priority: the oldest one
-- in one probe (GET /v1/queues, the queue metrics). No rows change, so nothing is rebuilt.

CREATE INDEX IF NOT EXISTS queue_v1_oldest ON queue_v1 (stage_type, seq)
    WHERE stage_open AND job_open;
