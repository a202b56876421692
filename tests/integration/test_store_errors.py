"""Driver and library errors reach the store's callers as the server's DatabaseError, wrapped
once where the store calls the driver (store/errors.py), on both backends."""

from __future__ import annotations

import pytest

from jobnik.domain.errors import DatabaseError, JobnikError
from jobnik.projections.store.base import SqlStore


def read_a_missing_table(store: SqlStore) -> None:
    with store.cursor(write=False) as cur:
        cur.execute("SELECT * FROM no_such_table")


def write_a_missing_table(store: SqlStore) -> None:
    with store.session(write=True) as s:
        s.cur.execute("INSERT INTO no_such_table VALUES (1)")


@pytest.mark.parametrize("fails", [read_a_missing_table, write_a_missing_table])
def test_a_failed_statement_is_the_servers_database_error(store: SqlStore, fails: object) -> None:
    with pytest.raises(DatabaseError) as raised:
        fails(store)  # type: ignore[operator]

    assert isinstance(raised.value, JobnikError)
    assert raised.value.code == "DATABASE_RELATED_ERROR"
    assert "no_such_table" in str(raised.value)


def test_the_log_read_after_close_is_the_servers_database_error(store: SqlStore) -> None:
    store.close()

    with pytest.raises(DatabaseError):
        store.notifications(0, 10)
