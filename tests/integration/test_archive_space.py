"""An archive run makes the space of the jobs it archived reusable (`SqlStore.reclaim_space`):
after the batch that leaves nothing due and every few batches of a backlog, on both backends,
without changing what a run archives; on PostgreSQL, two passes of VACUUM."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobnik.api import archives as archives_module
from jobnik.api.archives import Archiver
from jobnik.domain.application import Jobnik
from jobnik.projections.store.base import SqlStore

from .test_archives import DAY, Clock, ended_job, live_history, settle


def world(store: SqlStore, tmp_path: Path, batch: int = 100) -> tuple[Clock, Jobnik, Archiver]:
    """A clock, an engine on it and an archiver of `batch` jobs a run into a fresh directory."""
    clock = Clock()
    (tmp_path / "archive").mkdir()
    archiver = Archiver(store, tmp_path / "archive", 7 * DAY, batch=batch, clock=clock)
    return clock, Jobnik(store, clock=clock), archiver


def vacuums(store: SqlStore) -> int:
    """How many times the event table was vacuumed (PostgreSQL's own count)."""
    with store.cursor(write=False) as cur:
        row = cur.one(
            "SELECT vacuum_count AS n FROM pg_stat_user_tables "
            "WHERE schemaname = current_schema() AND relname = %(t)s",
            {"t": store.events_table},
        )
    assert row is not None
    return int(row["n"])


def test_a_run_reclaims_the_space_once_nothing_more_is_due(store: SqlStore, tmp_path: Path) -> None:
    clock, engine, archiver = world(store, tmp_path, batch=2)
    jobs = [ended_job(engine, "nightly") for _ in range(3)]
    clock.advance(8 * DAY)
    kept = ended_job(engine, "nightly")
    settle(store)

    runs = [archiver.run() for _ in range(3)]

    assert [len(r.archived) for r in runs] == [2, 1, 0]
    assert [r.reclaimed for r in runs] == [False, True, False]
    assert all(archiver.record(j) is not None for j in jobs)
    assert live_history(store, kept)
    assert list(archiver.verify()) == []


def test_a_backlog_reclaims_the_space_every_few_batches(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archives_module, "RECLAIM_EVERY", 2)
    clock, engine, archiver = world(store, tmp_path, batch=1)
    for _ in range(5):
        ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(store)

    runs = [archiver.run() for _ in range(7)]

    assert [len(r.archived) for r in runs] == [1, 1, 1, 1, 1, 0, 0]
    assert [r.reclaimed for r in runs] == [False, True, False, True, False, True, False]


def test_a_dry_run_reclaims_nothing(store: SqlStore, tmp_path: Path) -> None:
    clock, engine, archiver = world(store, tmp_path)
    ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(store)

    dry = archiver.run(dry_run=True)

    assert (len(dry.due), dry.archived, dry.reclaimed) == (1, [], False)


def test_a_failed_reclaim_is_tried_again_by_the_next_run(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, engine, archiver = world(store, tmp_path)
    job_id = ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(store)
    reclaim = store.reclaim_space

    def failing() -> None:
        raise OSError("no")

    monkeypatch.setattr(store, "reclaim_space", failing)
    with pytest.raises(OSError, match="no"):
        archiver.run()
    monkeypatch.setattr(store, "reclaim_space", reclaim)
    again = archiver.run()

    assert archiver.record(job_id) is not None
    assert (again.archived, again.reclaimed) == ([], True)


def test_on_postgresql_a_run_vacuums_each_table_twice(pg_store: SqlStore, tmp_path: Path) -> None:
    clock, engine, archiver = world(pg_store, tmp_path)
    for _ in range(3):
        ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(pg_store)
    before = vacuums(pg_store)

    run = archiver.run()

    assert (len(run.archived), run.reclaimed) == (3, True)
    assert vacuums(pg_store) - before == 2  # (both passes)
