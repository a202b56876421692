"""An archive run killed (SIGKILL) at each point of its work, on both backends: while writing a
file, after the files, inside the transaction after the removals, and after the commit. After
it, every job is either fully live or fully archived with a verifiable archive, never both,
never neither; the next run archives the rest once, and the read models verify."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobnik.api.archives import Archiver, catch_up_all
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import JobNotFound
from jobnik.projections.queries.audit import Audit
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_archives import ended_job

# The run in a process of its own, killed at `point` (argv: point, database URL, directory).
RUN = """
import os, signal, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobnik.api import archives
from jobnik.projections.rebuild import seeds
from jobnik.projections.store import archive_files
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.config import library_env

point, url, directory = sys.argv[1:4]


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


if point == "while_writing":  # the second file, two lines in
    written, write = [], archive_files.write

    def partly(folder, name, lines):
        def some():
            for i, line in enumerate(lines):
                if written and i == 2:
                    die()
                yield line
        written.append(name)
        return write(folder, name, some())

    archive_files.write = partly
elif point == "after_files":
    archives.commit = die
elif point == "before_commit":
    seeds.refresh = die
elif point == "after_commit":
    commit = archives.commit

    def committed(*args, **kwargs):
        commit(*args, **kwargs)
        die()

    archives.commit = committed
store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
later = datetime.now(UTC) + timedelta(days=30)
archives.Archiver(store, Path(directory), 3600, clock=lambda: later).run()
"""


def later_archiver(store: SqlStore, directory: Path) -> Archiver:
    from datetime import UTC, datetime, timedelta

    later = datetime.now(UTC) + timedelta(days=30)
    return Archiver(store, directory, 3600, clock=lambda: later)


@pytest.mark.parametrize("point", ["while_writing", "after_files", "before_commit", "after_commit"])
def test_a_run_killed_at_any_point_leaves_each_job_live_or_archived_and_the_next_run_finishes(
    store: SqlStore, database_url: str, tmp_path: Path, point: str
) -> None:
    directory = tmp_path / "archive"
    directory.mkdir()
    engine = Jobnik(store)
    jobs = [ended_job(engine, f"job-{i}", tasks=3) for i in range(3)]
    histories = {j: Audit(store).job_history(j, 0, 1000).items for j in jobs}
    catch_up_all(store)

    killed = subprocess.run(
        [sys.executable, "-c", RUN, point, database_url, str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert killed.returncode == -signal.SIGKILL, killed.stderr
    archiver = later_archiver(store, directory)
    archived = set()
    for j in jobs:
        record = archiver.record(j)
        try:
            live = Audit(store).job_history(j, 0, 1000).items
        except JobNotFound:
            live = None
        assert (record is None) != (live is None), j  # one of the two, never both or neither
        if live is not None:
            assert live == histories[j]
        else:
            archived.add(j)
    assert list(archiver.verify()) == []
    assert archived == (set(jobs) if point == "after_commit" else set())

    assert set(archiver.run().archived) == set(jobs) - archived
    assert list(archiver.verify()) == []
    assert verify(store) == []
