-- schedules: the schedules read model and their fire keys
-- One row per schedule (its clock, counters and next fire), and one per run: the fire key
-- (schedule, nominal time), written in the transaction that creates the run's job. No event
-- before this writes either table, so nothing is rebuilt.

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
