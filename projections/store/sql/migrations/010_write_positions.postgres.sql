-- write sessions: the writer lock, its checks and the events in one call; relative positions
-- jobnik_position(p): p itself when it is a log position (positive); otherwise the position of
-- the event -p places before the last event this session inserted. A write session appends its
-- events and writes their read-model rows in one round trip, before it knows the positions the
-- events table's sequence gives them; under the writer lock they are consecutive.
-- jobnik_append: the writer lock (the event table's), the transaction's commit without waiting
-- for its WAL flush, the check that the rows a session loaded before the lock (`seen`: objects
-- of id, version read, table) are unchanged (else serialization_failure), then the events, in order
-- (`events`: originator id, version, topic, stored state as text); the last one's position.

DO $$
BEGIN
    EXECUTE 'CREATE OR REPLACE FUNCTION jobnik_position(p bigint) RETURNS bigint '
        || 'LANGUAGE sql VOLATILE AS '
        || quote_literal('SELECT CASE WHEN p > 0 THEN p ELSE currval('
            || quote_literal(pg_get_serial_sequence('jobnik_events', 'notification_id'))
            || '::regclass) + p END');
END
$$;

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
