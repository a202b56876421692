"""The write path renders its values as SQL literals itself (projections/store/batch.py `_FAST`):
whatever the value, PostgreSQL must read back exactly what was rendered, alone and as part of
what a command writes (strings with quotes, backslashes and any unicode, large integers, times,
nested JSON)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import DatabaseError
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.batch import _FAST, BatchCursor, batch_transaction
from jobnik.projections.store.dialect import Dialect

OFFSETS = st.integers(-15 * 60, 15 * 60).map(lambda m: timezone(timedelta(minutes=m)))
OFFSET_TIMES = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 1, 1), timezones=OFFSETS
)
VALUES = st.one_of(
    st.uuids(),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.booleans(),
    st.binary(max_size=300),
    st.datetimes(timezones=st.just(UTC)),
    st.lists(st.uuids(), min_size=1, max_size=20),  # a batch's keys
)


@pytest.fixture(scope="module")
def conn(pg_server_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_server_url, autocommit=True) as c:
        yield c


def read_back(conn: psycopg.Connection[Any], value: Any) -> Any:
    with batch_transaction(conn, Dialect()) as cur:
        assert cur._fast  # the server conforms: the fast path is the one under test
        return cur.raw_all("SELECT %(v)s AS v", {"v": value})[0]["v"]


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_a_value_rendered_by_the_fast_path_reads_back_unchanged(
    conn: psycopg.Connection[Any], value: Any
) -> None:
    assert _FAST[type(value)](value) is not None  # rendered here, not by psycopg

    back = read_back(conn, value)

    if isinstance(back, Decimal):  # a literal past bigint reads as numeric
        back = int(back)
    assert back == value
    assert type(back) is type(value)


def test_quotes_and_backslashes_stay_inside_the_literal(conn: psycopg.Connection[Any]) -> None:
    hostile = "x'); DROP TABLE t; --\\'"

    assert read_back(conn, hostile) == hostile


def test_a_negative_number_after_a_minus_is_not_a_comment(conn: psycopg.Connection[Any]) -> None:
    with batch_transaction(conn, Dialect()) as cur:
        assert cur.raw_all("SELECT 1 -%(v)s AS v", {"v": -1})[0]["v"] == 2


@settings(max_examples=100, deadline=None)
@given(OFFSET_TIMES.filter(lambda t: t.utcoffset() != timedelta(0)))
def test_a_time_with_another_offset_goes_through_psycopg(
    conn: psycopg.Connection[Any], value: datetime
) -> None:
    assert _FAST[datetime](value) is None

    assert read_back(conn, value) == value


def test_what_the_fast_path_declines_goes_through_psycopg(conn: psycopg.Connection[Any]) -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5)

    assert _FAST[str]("a\x00b") is None
    assert _FAST[datetime](naive) is None
    assert read_back(conn, naive) == naive  # psycopg: a timestamp without time zone
    with pytest.raises((psycopg.DataError, DatabaseError)):  # psycopg refuses a NUL in text
        read_back(conn, "a\x00b")


def test_a_server_without_standard_strings_gets_psycopgs_literals(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("SET standard_conforming_strings TO off")
    try:
        cur = BatchCursor(conn, Dialect())
        back = cur.raw_all("SELECT %(v)s AS v", {"v": "back\\slash"})[0]["v"]
        cur.rollback()
    finally:
        conn.execute("SET standard_conforming_strings TO on")

    assert not cur._fast
    assert back == "back\\slash"


TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=TEXT.filter(bool), data=st.dictionaries(TEXT, JSON, max_size=5))
def test_what_a_command_writes_through_the_batched_path_reads_back_equal(
    pg_store: SqlStore, name: str, data: dict[str, Any]
) -> None:
    app = Jobnik(pg_store)
    job = app.create_job(NewJob(name=name, data=data, user_metadata={"nested": data}))
    stage = app.add_stage(job.id, NewStage(type=name, data=data))
    [task] = app.add_tasks(stage.id, [NewTask(data=data)])

    with pg_store.session(write=False) as s:
        loaded_job, loaded_stage, loaded_task = s.job(job.id), s.stage(stage.id), s.task(task.id)
    [event] = [e for e in pg_store.log_app.events.get(task.id)]

    assert (loaded_job.name, loaded_job.data) == (name, data)
    assert loaded_job.user_metadata == {"nested": data}
    assert loaded_job.created_on == job.created_on
    assert (loaded_stage.type, loaded_stage.data) == (name, data)
    assert (loaded_task.stage_type, loaded_task.data) == (name, data)
    assert loaded_task.modified_on == task.modified_on
    assert event.data == data
