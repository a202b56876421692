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
