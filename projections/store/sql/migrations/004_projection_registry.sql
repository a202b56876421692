-- projection registry
-- Every projection's name, the version of the code that built its rows, and the log
-- position they reflect (catchup/registry.py).

CREATE TABLE IF NOT EXISTS jobnik_projections (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    position BIGINT NOT NULL,
    rebuilt_at {time}
);
