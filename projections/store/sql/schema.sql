-- The whole schema of a new database, for both backends: every migration's result in one go
-- (tests/integration/test_migrations.py checks that the two are equal). Type placeholders:
-- {uuid}, {json}, {time}, {bool}, {false} (see store/dialect.py). PostgreSQL adds
-- schema.postgres.sql.

-- The inline read models: jobs, stages, their task summaries, tasks and the dequeue queue.
CREATE TABLE IF NOT EXISTS jobs_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL,
    data {json} NOT NULL,
    priority TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    percentage INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    started {bool} NOT NULL,
    stage_count INTEGER NOT NULL,
    completed_stages INTEGER NOT NULL,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time},
    mode TEXT NOT NULL DEFAULT 'runOnce',
    parent_task_id {uuid},
    parent_job_id {uuid},
    completion_stages INTEGER NOT NULL DEFAULT 0,
    finishing {bool} NOT NULL DEFAULT {false},
    completing {bool} NOT NULL DEFAULT {false},
    finish_time {time},
    not_before {time},
    retry_policy {json},
    deadline {time},
    schedule_to_start_seconds INTEGER,
    fairness_key TEXT,
    concurrency_key TEXT,
    gate TEXT,
    fairness_weight INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_v1_name ON jobs_v1 (name);
CREATE INDEX IF NOT EXISTS jobs_v1_creation_time ON jobs_v1 (creation_time);
CREATE INDEX IF NOT EXISTS jobs_v1_parent_task ON jobs_v1 (parent_task_id);
CREATE INDEX IF NOT EXISTS jobs_v1_parent_job ON jobs_v1 (parent_job_id);

CREATE TABLE IF NOT EXISTS stages_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    job_id {uuid} NOT NULL,
    stage_order INTEGER NOT NULL,
    type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time},
    completion {bool} NOT NULL DEFAULT {false},
    failure_patterns {json} NOT NULL DEFAULT '[]',
    not_before {time},
    retry_policy {json},
    deadline {time},
    schedule_to_start_seconds INTEGER,
    UNIQUE (job_id, stage_order)
);
CREATE INDEX IF NOT EXISTS stages_v1_type ON stages_v1 (type);
-- The sweeper's probes for deadlines passed (store/sql/queries.sql: missed_deadlines).
CREATE INDEX IF NOT EXISTS jobs_v1_deadline ON jobs_v1 (deadline)
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED');
CREATE INDEX IF NOT EXISTS stages_v1_deadline ON stages_v1 (deadline)
    WHERE deadline IS NOT NULL AND status NOT IN ('COMPLETED', 'FAILED', 'ABORTED');

CREATE TABLE IF NOT EXISTS summaries_v1 (
    stage_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0,
    in_progress INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    created INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    aborted INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0,
    delegated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS summaries_v1_job ON summaries_v1 (job_id);

CREATE TABLE IF NOT EXISTS tasks_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    stage_id {uuid} NOT NULL,
    job_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time},
    lease_seconds INTEGER NOT NULL DEFAULT 0,
    lease_expires_at {time},
    result {json},
    delegations INTEGER NOT NULL DEFAULT 0,
    delegated_at {time},
    holder TEXT,
    not_before {time},
    retry_policy {json}
);
CREATE INDEX IF NOT EXISTS tasks_v1_stage ON tasks_v1 (stage_id);
CREATE INDEX IF NOT EXISTS tasks_v1_job_status ON tasks_v1 (job_id, status);
CREATE INDEX IF NOT EXISTS tasks_v1_type_status ON tasks_v1 (stage_type, status);
CREATE INDEX IF NOT EXISTS tasks_v1_lease ON tasks_v1 (lease_expires_at)
    WHERE status = 'IN_PROGRESS';
CREATE INDEX IF NOT EXISTS tasks_v1_delegated ON tasks_v1 (delegated_at)
    WHERE status = 'DELEGATED';

CREATE TABLE IF NOT EXISTS queue_v1 (
    task_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    stage_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    seq BIGINT NOT NULL,
    stage_open {bool} NOT NULL,
    job_open {bool} NOT NULL,
    not_before {time},
    expire_seconds INTEGER,
    expires_at {time},
    turn BIGINT NOT NULL DEFAULT 0,
    fairness_key TEXT,
    gate TEXT,
    held {bool} NOT NULL DEFAULT {false}
);
-- The claim's two probes (inline/queue.py): tasks ready now, and delayed ones by due time.
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, turn, seq)
    WHERE stage_open AND job_open AND not_before IS NULL AND NOT held;
CREATE INDEX IF NOT EXISTS queue_v1_due ON queue_v1 (stage_type, not_before, seq)
    WHERE stage_open AND job_open AND not_before IS NOT NULL AND NOT held;
CREATE INDEX IF NOT EXISTS queue_v1_oldest ON queue_v1 (stage_type, seq)
    WHERE stage_open AND job_open AND not_before IS NULL;
CREATE INDEX IF NOT EXISTS queue_v1_job ON queue_v1 (job_id);
-- The sweeper's probe for queued tasks past their schedule-to-start limit (queries.sql:
-- expired_queued); a row has an expiry only while it can be dequeued.
CREATE INDEX IF NOT EXISTS queue_v1_expiry ON queue_v1 (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS queue_v1_stage ON queue_v1 (stage_id, turn);
-- A fairness key's last turn at a stage type (queries.sql: queue_turns).
CREATE INDEX IF NOT EXISTS queue_v1_fairness ON queue_v1 (stage_type, fairness_key, turn)
    WHERE fairness_key IS NOT NULL;
-- A per-key limit's gates (inline/gates.py): each gate's queued tasks in the order they are
-- admitted (ready ones by the claim's order, then delayed ones by due time), and the ones
-- admitted now.
CREATE INDEX IF NOT EXISTS queue_v1_gate ON queue_v1 (stage_type, gate, priority_rank, turn, seq)
    WHERE gate IS NOT NULL AND stage_open AND job_open AND not_before IS NULL;
CREATE INDEX IF NOT EXISTS queue_v1_gate_due ON queue_v1 (stage_type, gate, not_before, seq)
    WHERE gate IS NOT NULL AND stage_open AND job_open AND not_before IS NOT NULL;
CREATE INDEX IF NOT EXISTS queue_v1_admitted ON queue_v1 (stage_type, gate)
    WHERE gate IS NOT NULL AND NOT held;

-- The task log: a row per append (its lines as a JSON array), keyed by its event's position.
CREATE TABLE IF NOT EXISTS task_logs_v2 (
    task_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    job_id {uuid} NOT NULL,
    attempt INTEGER NOT NULL,
    actor TEXT NOT NULL,
    time {time} NOT NULL,
    line_count INTEGER NOT NULL,
    lines {json} NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE INDEX IF NOT EXISTS task_logs_v2_job ON task_logs_v2 (job_id);

-- The history index: which job each event belongs to, kept when the job is deleted.
CREATE TABLE IF NOT EXISTS entity_jobs_v1 (
    entity_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    kind TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_events_v1 (
    job_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    PRIMARY KEY (job_id, position)
);

-- The projection registry (catchup/registry.py).
CREATE TABLE IF NOT EXISTS jobnik_projections (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    position BIGINT NOT NULL,
    rebuilt_at {time}
);

-- Idempotency-Keys (api/idempotency.py): not a projection, nothing in the log rebuilds it.
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

-- Access control: the tokens read model.
CREATE TABLE IF NOT EXISTS tokens_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    stage_types {json} NOT NULL,
    expires_at {time},
    secret_hash TEXT NOT NULL,
    issued_at {time} NOT NULL,
    issued_by TEXT NOT NULL,
    update_time {time} NOT NULL,
    revoked_at {time},
    revoked_by TEXT
);

-- Schedules: one row per schedule, and the fire keys, (schedule, nominal time) of each run.
CREATE TABLE IF NOT EXISTS schedules_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL UNIQUE,
    cron TEXT,
    timezone TEXT NOT NULL,
    interval_seconds BIGINT,
    template {json} NOT NULL,
    overlap TEXT NOT NULL,
    catchup TEXT NOT NULL,
    catchup_window INTEGER NOT NULL,
    paused {bool} NOT NULL,
    pause_reason TEXT,
    cursor_time {time} NOT NULL,
    next_fire_at {time},
    buffered_time {time},
    last_job_id {uuid},
    last_fire_time {time},
    fired INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    buffered INTEGER NOT NULL DEFAULT 0,
    missed INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL
);
CREATE INDEX IF NOT EXISTS schedules_v1_next_fire ON schedules_v1 (next_fire_at)
    WHERE NOT paused;
CREATE TABLE IF NOT EXISTS schedule_fires_v1 (
    schedule_id {uuid} NOT NULL,
    nominal_time {time} NOT NULL,
    job_id {uuid} NOT NULL,
    started_by TEXT NOT NULL,
    fired_at {time} NOT NULL,
    PRIMARY KEY (schedule_id, nominal_time)
);

-- Stage type limits: one row per stage type whose limits were set (NULL: not set, or removed),
-- and each rate's token bucket (a type's: gate ''; each key's under a per-key rate: its gate): its
-- tokens at `refilled_at` (seconds since 1970, the database's clock), and for a key's, when it next
-- holds one more whole token (`wake_at`, NULL when full). The buckets are not a read model: claims
-- draw from them, and a rebuild leaves them.
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
    update_time {time} NOT NULL,
    queue_order TEXT NOT NULL DEFAULT 'fifo',
    max_in_progress_per_key INTEGER,
    key_rate_starts INTEGER,
    key_rate_interval_seconds INTEGER
);
CREATE TABLE IF NOT EXISTS jobnik_buckets (
    stage_type TEXT NOT NULL,
    gate TEXT NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at DOUBLE PRECISION NOT NULL,
    wake_at DOUBLE PRECISION,
    PRIMARY KEY (stage_type, gate)
);
CREATE INDEX IF NOT EXISTS jobnik_buckets_wake ON jobnik_buckets (stage_type, wake_at)
    WHERE wake_at IS NOT NULL;

-- Retention and archives: the retention period set per job name, one row per archived job, and
-- where each catch-up projection's seed stands (the position its `<table>_seed` copies are of).
CREATE TABLE IF NOT EXISTS retention_v1 (
    name TEXT PRIMARY KEY,
    period_seconds BIGINT NOT NULL,
    set_by TEXT NOT NULL,
    set_time {time} NOT NULL
);
-- Each archived job: the log position of its archive record, which holds the rest
-- (domain/archives.py); its file and checksum here only once an erasure rewrote them.
CREATE TABLE IF NOT EXISTS archives_v2 (
    job_id {uuid} PRIMARY KEY,
    position BIGINT NOT NULL,
    location TEXT,
    checksum TEXT
);
-- The console's archives archived last, and verify's walk, record by record
-- (queries/archives.py).
CREATE INDEX IF NOT EXISTS archives_v2_position ON archives_v2 (position);
CREATE TABLE IF NOT EXISTS archive_seeds_v1 (
    projection TEXT PRIMARY KEY,
    position BIGINT NOT NULL
);
