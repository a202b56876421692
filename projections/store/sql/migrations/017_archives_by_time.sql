-- retention: the archives archived last, for the console, by an index rather than a sort
CREATE INDEX IF NOT EXISTS archives_v1_archived_at ON archives_v1 (archived_at);
