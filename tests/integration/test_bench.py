from __future__ import annotations

from urllib.parse import urlparse, urlunparse

from jobnik.scripts.bench import NAMES, TINY, run_suite


def test_every_figure_of_the_suite_measures_jobnik_and_its_floor(database_url: str) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    server = urlunparse(urlparse(database_url)._replace(path="/postgres"))

    figures, goals = run_suite([backend], NAMES, TINY, pg_url=server, database_url=database_url)

    names = {f.name.split()[0] for f in figures}
    assert names == {"engine", "HTTP", "bulk", "dequeue", "rebuild", "hot"}
    for f in figures:
        assert f.backend == backend
        if f.floor is None:  # counts (lock waits, retries) may be zero
            assert f.value >= 0, f
        else:
            assert f.value > 0, f
            assert f.floor > 0, f
    assert len(goals) == 7
