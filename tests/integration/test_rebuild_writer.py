"""The rebuild's threads on PostgreSQL: the page writer (projections/store/pagewriter.py) and the
read-ahead (projections/rebuild/readahead.py). Order, reads, commits, errors, and a rebuild that
fails mid-way."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import DatabaseError
from jobnik.projections.catchup import run_stats
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.readahead import read_ahead
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.pagewriter import Writer
from jobnik.projections.store.postgres import PostgresStore


@pytest.fixture
def pg(pg_store: SqlStore) -> SqlStore:
    with pg_store.cursor(write=True) as cur:
        cur.execute("CREATE TABLE w (n INTEGER PRIMARY KEY)")
    return pg_store


def page_writer(store: SqlStore) -> Writer:
    assert isinstance(store, PostgresStore)
    return Writer(store.connection_kwargs(), store.dialect)


def numbers(store: SqlStore) -> list[int]:
    with store.cursor(write=False) as cur:
        return [r["n"] for r in cur.all("SELECT n FROM w ORDER BY n")]


def test_reads_see_the_writes_queued_before_them_and_each_page_commits(pg: SqlStore) -> None:
    with page_writer(pg) as writer:
        with writer.page() as cur:
            cur.execute("INSERT INTO w VALUES (1)")
            assert cur.all("SELECT n FROM w") == [{"n": 1}]
            cur.later(lambda c: c.execute("INSERT INTO w VALUES (2)"))
        with writer.page() as cur:
            cur.executemany("INSERT INTO w VALUES (%(n)s)", [{"n": 3}, {"n": 4}])
            assert cur.one("SELECT count(*) AS c FROM w") == {"c": 4}
        with writer.page():
            pass  # an empty page
    assert numbers(pg) == [1, 2, 3, 4]


def two_pages(store: SqlStore, then: Callable[[Cursor], None]) -> None:
    """A page inserting 1, then one inserting 2 and running `then` in it."""
    with page_writer(store) as writer:
        with writer.page() as cur:
            cur.execute("INSERT INTO w VALUES (1)")
        with writer.page() as cur:
            cur.execute("INSERT INTO w VALUES (2)")
            then(cur)


def insert_a_duplicate(cur: Cursor) -> None:
    cur.execute("INSERT INTO w VALUES (1)")  # fails on the writer's thread
    cur.all("SELECT n FROM w")  # raises here, the caller's next wait


def fail_the_fold(cur: Cursor) -> None:
    raise RuntimeError("the fold failed")


def test_a_failed_statement_is_raised_in_the_caller_and_its_page_rolled_back(
    pg: SqlStore,
) -> None:
    with pytest.raises(DatabaseError, match="duplicate key"):
        two_pages(pg, insert_a_duplicate)
    assert numbers(pg) == [1]


def test_a_page_the_caller_abandons_is_rolled_back(pg: SqlStore) -> None:
    with pytest.raises(RuntimeError):
        two_pages(pg, fail_the_fold)
    assert numbers(pg) == [1]


def test_read_ahead_yields_in_order_and_raises_the_sources_error() -> None:
    before = sys.getswitchinterval()
    assert list(read_ahead(iter(range(100)), depth=2)) == list(range(100))
    first, second = read_ahead(iter(range(3))), read_ahead(iter(range(3)))
    next(first), next(second)  # two at once: the shorter interval holds until both end
    first.close()
    assert sys.getswitchinterval() < before
    second.close()
    assert sys.getswitchinterval() == before

    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("bad page")

    seen: list[int] = []
    with pytest.raises(ValueError, match="bad page"):
        seen.extend(read_ahead(failing()))
    assert seen == [1]


def test_a_rebuild_whose_write_fails_keeps_the_live_tables_and_leaves_no_thread(
    pg: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobnik = Jobnik(pg)
    job = jobnik.create_job(NewJob(name="w", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="w", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(5)])
    rebuild(pg)
    with pg.cursor(write=False) as cur:
        before = cur.all("SELECT * FROM tasks_v1 ORDER BY id")
    threads = threading.active_count()
    monkeypatch.setattr(run_stats, "INSERT_STAGE", "INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(DatabaseError, match="no_such_table"):
        rebuild(pg)

    with pg.cursor(write=False) as cur:
        assert cur.all("SELECT * FROM tasks_v1 ORDER BY id") == before
        shadows = cur.all("SELECT tablename FROM pg_tables WHERE tablename LIKE '%%__next'")
    assert shadows == []
    assert threading.active_count() == threads
