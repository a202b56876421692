"""A worker's dequeue and report each stay one short road on PostgreSQL: the statements a single
command sends are counted (docs/performance.md: about eight, in two round trips), so a change that
adds a statement to every task's road is seen here, not only in a benchmark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.store.base import SqlStore

# BEGIN, the shared swap lock, the read; then the writer lock with the events, the read-model
# rows, a claim's limits check (a dequeue) or the per-key regate and the stage-completion check (a
# report), COMMIT, the flush.
DEQUEUE_STATEMENTS = 8
REPORT_STATEMENTS = 9


@contextmanager
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement psycopg is asked to run meanwhile, in order (one
    `executemany`, one entry)."""
    sent: list[str] = []

    def counting(name: str) -> Callable[..., Any]:
        run = getattr(psycopg.Cursor, name)

        def counted(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query).split("\n", 1)[0][:80])
            return run(self, query, *args, **kwargs)

        return counted

    with monkeypatch.context() as patch:
        for name in ("execute", "executemany"):
            patch.setattr(psycopg.Cursor, name, counting(name))
        yield sent


def queued(app: Jobnik, n: int) -> None:
    job = app.create_job(NewJob(name="road", data={}))
    stage = app.add_stage(job.id, NewStage(type="road", data={}))
    app.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(n)])


def sent_by(monkeypatch: pytest.MonkeyPatch, command: Callable[[], Any]) -> list[str]:
    with statements(monkeypatch) as sent:
        command()
    return sent


def test_a_dequeue_and_a_report_each_send_a_few_statements(
    pg_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Jobnik(pg_store)
    queued(app, 3)
    first = app.dequeue("road")  # (the first command of a stage also starts it and its job)
    app.report_task(first.id, TaskStatus.COMPLETED, attempt=first.attempt)

    task = app.dequeue("road")
    dequeue = sent_by(monkeypatch, lambda: app.dequeue("road"))
    report = sent_by(
        monkeypatch, lambda: app.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    )

    for sent in (dequeue, report):
        assert sent[0] == "BEGIN", sent
        assert sent[-2] == "COMMIT", sent
    assert len(dequeue) <= DEQUEUE_STATEMENTS, dequeue
    assert len(report) <= REPORT_STATEMENTS, report
