-- PostgreSQL's part of a new database's schema (see migration 007).

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
