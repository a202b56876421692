-- optimistic write sessions: freshness check, WAL flush rows
-- jobnik_assert_fresh: the check a write session runs when it takes the writer lock: `seen` of
-- the `expected` aggregates it loaded before the lock still have the version it read, else
-- serialization_failure, and the command runs again. jobnik_wal_flush: kept for processes of an
-- older version during a rolling deploy (write sessions now flush with a logical message).
-- SQLite needs neither: its write sessions hold the lock from BEGIN IMMEDIATE.

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
