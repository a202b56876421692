"""A report without attempt (Jobnik's SDK sends none) is fenced by the task's version its first
transaction read: run again after a conflict, it is refused if the task changed meanwhile, and
it costs no read transaction of its own before its write."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest

from jobnik.domain.application import Jobnik
from jobnik.domain.commands import conflicts_retried
from jobnik.domain.errors import TaskStatusUpdateFailed
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.work import FirstRead
from jobnik.projections.store.base import SqlStore
from tests.integration.test_optimistic import interleave_before_lock, one_task_job

C = TaskStatus.COMPLETED


def test_the_first_read_is_noted_and_a_later_read_of_another_version_refuses() -> None:
    seen = FirstRead()
    seen.check(3)
    seen.check(3)
    assert seen.version == 3
    with pytest.raises(TaskStatusUpdateFailed):
        seen.check(4)


def test_a_report_without_attempt_whose_task_changed_before_it_ran_again_is_refused(
    pg_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobnik = Jobnik(pg_store)
    one_task_job(jobnik, "fence")
    task = jobnik.dequeue("fence")
    before = conflicts_retried()
    # the report reads the task, then a heartbeat changes it before the report's lock
    interleave_before_lock(monkeypatch, lambda: jobnik.heartbeat(task.id, task.attempt))

    with pytest.raises(TaskStatusUpdateFailed):
        jobnik.report_task(task.id, C, by=Actor.API)

    assert conflicts_retried() == before + 1
    with pg_store.session(write=False) as r:
        now = r.task(task.id)
    assert now.status == TaskStatus.IN_PROGRESS
    assert now.version == task.version + 1  # the heartbeat's change only


def test_a_report_without_attempt_that_ran_again_on_an_unchanged_task_is_written(
    pg_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobnik = Jobnik(pg_store)
    job, _ = one_task_job(jobnik, "fence-again")
    task = jobnik.dequeue("fence-again")
    before = conflicts_retried()
    # the job (which the report completes) changes before the report's lock: it runs again,
    # and finds its task as it first read it
    interleave_before_lock(
        monkeypatch, lambda: jobnik.replace_job_user_metadata(job.id, {"by": "elsewhere"})
    )

    done = jobnik.report_task(task.id, C, by=Actor.API)

    assert done.status == C
    assert conflicts_retried() == before + 1
    with pg_store.session(write=False) as r:
        assert r.job(job.id).user_metadata == {"by": "elsewhere"}


def test_a_report_without_attempt_reads_nothing_before_its_write(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_task_job(jobnik, "fence-one")
    task = jobnik.dequeue("fence-one")
    sessions: list[bool] = []
    opened = store.session

    def counted(*, write: bool) -> AbstractContextManager[Any]:
        sessions.append(write)
        return opened(write=write)

    monkeypatch.setattr(store, "session", counted)
    done = jobnik.report_task(task.id, C, by=Actor.API)

    assert done.status == C
    assert sessions == [True]


def test_a_report_without_attempt_reads_its_task_from_the_database_not_this_process_memory(
    pg_store: SqlStore, other: SqlStore
) -> None:
    here, there = Jobnik(pg_store), Jobnik(other)
    one_task_job(here, "fence-memory")
    task = here.dequeue("fence-memory")  # this process remembers the task it wrote
    there.heartbeat(task.id, task.attempt)  # another process changes it since
    before = conflicts_retried()

    done = here.report_task(task.id, C, by=Actor.API)

    assert done.status == C
    assert conflicts_retried() == before  # nothing read from memory went stale
