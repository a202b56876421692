-- idempotency keys
-- One row per Idempotency-Key, written in the transaction of the command it guards
-- (api/idempotency.py). Not a projection: nothing in the log rebuilds it. The body is TEXT
-- on both backends, so a replay answers the original bytes (jsonb would reorder keys).

CREATE TABLE IF NOT EXISTS jobnik_idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    position BIGINT,
    created_at {time} NOT NULL
);
CREATE INDEX IF NOT EXISTS jobnik_idempotency_keys_created_at
    ON jobnik_idempotency_keys (created_at);
