-- write positions: a read-model row names its event's log position relative to the last insert
-- jobnik_position(p): p itself when it is a log position (positive); otherwise the position of
-- the event -p places before the last event this session inserted. A write session appends its
-- events and writes their read-model rows in one round trip, before it knows the positions the
-- events table's sequence gives them; under the writer lock they are consecutive.

DO $$
BEGIN
    EXECUTE 'CREATE OR REPLACE FUNCTION jobnik_position(p bigint) RETURNS bigint '
        || 'LANGUAGE sql VOLATILE AS '
        || quote_literal('SELECT CASE WHEN p > 0 THEN p ELSE currval('
            || quote_literal(pg_get_serial_sequence('jobnik_events', 'notification_id'))
            || '::regclass) + p END');
END
$$;
