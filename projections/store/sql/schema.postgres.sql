-- PostgreSQL's part of a new database's schema (see migrations 007 and 010).

CREATE OR REPLACE FUNCTION jobnik_assert_fresh(seen bigint, expected bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF seen <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'stale read: '
            || (expected - seen) || ' of ' || expected || ' aggregates changed since loaded';
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS jobnik_wal_flush (
    backend INTEGER PRIMARY KEY,
    commits BIGINT NOT NULL
);

-- The log position of a read-model row's event (migration 010).
DO $$
BEGIN
    EXECUTE 'CREATE OR REPLACE FUNCTION jobnik_position(p bigint) RETURNS bigint '
        || 'LANGUAGE sql VOLATILE AS '
        || quote_literal('SELECT CASE WHEN p > 0 THEN p ELSE currval('
            || quote_literal(pg_get_serial_sequence('jobnik_events', 'notification_id'))
            || '::regclass) + p END');
END
$$;

-- The writer lock with its checks, and the events (migration 010).
CREATE OR REPLACE FUNCTION jobnik_append(seen json, events json) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v record;
    fresh boolean;
    changed integer := 0;
    last bigint;
BEGIN
    LOCK TABLE jobnik_events IN EXCLUSIVE MODE;
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR v IN SELECT * FROM json_to_recordset(seen) AS x(id uuid, version bigint, tbl text) LOOP
        IF v.tbl = 'tasks_v1' THEN
            fresh := EXISTS (SELECT FROM tasks_v1 WHERE id = v.id AND version = v.version);
        ELSIF v.tbl = 'stages_v1' THEN
            fresh := EXISTS (SELECT FROM stages_v1 WHERE id = v.id AND version = v.version);
        ELSIF v.tbl = 'jobs_v1' THEN
            fresh := EXISTS (SELECT FROM jobs_v1 WHERE id = v.id AND version = v.version);
        ELSE
            fresh := EXISTS (SELECT FROM tokens_v1 WHERE id = v.id AND version = v.version);
        END IF;
        IF NOT fresh THEN
            changed := changed + 1;
        END IF;
    END LOOP;
    IF changed > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'stale read: '
            || changed || ' of ' || json_array_length(seen)
            || ' aggregates changed since loaded';
    END IF;
    WITH appended AS (
        INSERT INTO jobnik_events (originator_id, originator_version, topic, state)
        SELECT (e->>0)::uuid, (e->>1)::bigint, e->>2, convert_to(e->>3, 'UTF8')
        FROM json_array_elements(events) e
        RETURNING notification_id
    )
    SELECT max(notification_id) INTO last FROM appended;
    RETURN last;
END
$$;
