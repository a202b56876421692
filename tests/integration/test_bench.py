from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse, urlunparse

from jobnik.scripts.bench import run_suite
from jobnik.scripts.bench.context import TINY
from jobnik.scripts.bench.report import Figure, Goal

IN_DATABASE = ["engine", "http", "bulk", "hot", "backoff", "limits", "fairness"]
OWN_DATABASES = [
    "depth",
    "scrape",
    "rebuild",
    "retention",
]  # they make their own databases and files


def run_figures(database_url: str, names: list[str]) -> tuple[list[Figure], list[Goal]]:
    """The suite's figures `names` at the test's sizes, in `database_url` (on its backend)."""
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    server = urlunparse(urlparse(database_url)._replace(path="/postgres"))
    return run_suite([backend], names, TINY, server, database_url)


def test_every_figure_of_the_suite_measures_jobnik_and_its_floor(database_url: str) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    server = urlunparse(urlparse(database_url)._replace(path="/postgres"))

    with ThreadPoolExecutor(2) as pool:  # concurrently, to keep the test short: values are noisy
        runs = [
            # two API processes on PostgreSQL: the suite's default on this 2-core machine
            pool.submit(run_suite, [backend], names, TINY, server, database_url, api_processes=2)
            for names in (IN_DATABASE, OWN_DATABASES)
        ]
        results = [run.result() for run in runs]
    figures = [f for figs, _ in results for f in figs]
    goals = [g for _, gs in results for g in gs]

    names = {f.name.split()[0] for f in figures}
    assert names == {
        "engine",
        "HTTP",
        "bulk",
        "dequeue",
        "scrape",
        "rebuild",
        "hot",
        "live",
        "archive",
        "small",
    }
    for f in figures:
        assert f.backend == backend
        if f.floor is None:  # counts (lock waits, retries) may be zero
            assert f.value >= 0, f
        else:
            assert f.value > 0, f
            assert f.floor > 0, f
    assert len(goals) == 16  # one per goal
    backoff = next(f for f in figures if f.name.endswith("with backoff"))
    assert "without a retry policy" in backoff.floor_name
    limited = [f for f in figures if "never bind" in f.name]
    assert len(limited) == 3  # a concurrency limit and a rate; a per-key limit; a per-key rate
    assert {f.floor_name for f in limited} == {"the same stage type without limits"}
    fair = [f for f in figures if "fair order" in f.name]
    assert [(f.unit, f.floor_name) for f in fair] == [
        ("s", "first in, first out"),
        ("tasks/s", "first in, first out"),
    ]
    http = next(f for f in figures if f.name.startswith("HTTP lifecycle"))
    assert f"{2 if backend == 'postgres' else 1} uvicorn processes" in http.note


def test_the_engine_figure_runs_its_workers_as_threads_and_as_processes(
    database_url: str,
) -> None:
    figures, goals = run_figures(database_url, ["engine"])

    assert [(f.name, f.floor_name) for f in figures] == [
        ("engine lifecycle K=1", "raw SQL lifecycle, 1 threads"),
        ("engine lifecycle K=1 (processes)", "raw SQL lifecycle, 1 processes"),
        ("engine lifecycle K=4", "raw SQL lifecycle, 4 threads"),
        ("engine lifecycle K=4 (processes)", "raw SQL lifecycle, 4 processes"),
    ]
    assert all(f.value > 0 and f.floor and f.floor > 0 for f in figures), figures
    assert all("worker CPU" in f.note for f in figures), figures
    assert [g.name for g in goals] == ["engine lifecycle >= 75% of floor at K=4 (processes)"]
    assert "with 4 processes" in goals[0].detail
    assert "with 4 threads" in goals[0].detail


def test_the_observe_figure_sets_each_telemetry_variant_beside_telemetry_off(
    database_url: str,
) -> None:
    figures, goals = run_figures(database_url, ["observe"])

    cpu, *lifecycle = figures
    assert cpu.name == "server CPU per request, metrics"
    assert cpu.value > 0
    assert cpu.floor is not None
    assert cpu.floor > 0
    assert [f.name for f in lifecycle] == [
        "HTTP lifecycle K=2, telemetry off",
        "HTTP lifecycle K=2, metrics",
        "HTTP lifecycle K=2, metrics + request logs",
        "HTTP lifecycle K=2, metrics + traces",
    ]
    assert all(f.value > 0 and f.floor == lifecycle[0].value for f in lifecycle)
    assert [g.name for g in goals] == [
        "metrics cost <= 5% of a request's server CPU",
        "metrics cost <= 5% of HTTP lifecycle throughput",
    ]
    assert "with traces" in goals[1].detail


def test_the_console_figure_times_the_jobs_page_beside_its_statements(database_url: str) -> None:
    figures, goals = run_figures(database_url, ["console"])

    assert [f.name for f in figures] == [
        "console jobs page, first of 300 jobs",
        "console jobs page, status filter, 300 jobs",
    ]
    assert all(f.value > 0 and f.floor for f in figures), figures
    assert [g.name for g in goals] == ["console: the jobs page's first page at 300 jobs < 300 ms"]


def test_the_batch_and_plain_client_figures_stand_beside_their_floors(database_url: str) -> None:
    figures, goals = run_figures(database_url, ["batch", "plain"])

    assert [f.name for f in figures] == [
        "engine lifecycle K=4, batches of 10",
        "HTTP lifecycle K=4, batches of 10",
        "HTTP lifecycle, plain keep-alive client, 8 connections",
    ]
    assert all(f.value > 0 and f.floor and f.floor > 0 for f in figures)
    assert figures[-1].floor_name == "raw SQL lifecycle, 8 threads"
    assert [g.name for g in goals] == ["HTTP batches of 10 >= 2x the floor at K=4"]


def test_the_cpu_figure_reads_the_server_the_clients_and_the_database_per_task(
    database_url: str,
) -> None:
    figures, goals = run_figures(database_url, ["cpu"])

    server, clients, *database = figures
    assert server.name == "API server CPU per task (plain client)"
    assert "one uvicorn process" in server.note
    assert clients.name == "client CPU per task (plain client)"
    if database_url.startswith("sqlite"):
        assert database == []
    else:  # when this machine's /proc shows PostgreSQL's backends
        assert [f.name for f in database] in ([], ["PostgreSQL CPU per task (plain client)"])
    assert all(f.floor is None and f.unit == "ms" and f.value >= 0 for f in figures), figures
    assert goals == []


def test_the_cardinality_figure_scrapes_many_stage_types_beside_few(database_url: str) -> None:
    figures, goals = run_figures(database_url, ["cardinality"])

    assert [(f.name, f.unit) for f in figures] == [
        ("scrape /metrics over 80 stage types, 30 scrapers at once, median", "ms"),
        ("scrape /metrics over 80 stage types, 30 scrapers at once, slowest", "ms"),
        ("scrape /metrics over 80 stage types, size", "KiB"),
    ]
    assert all(f.value > 0 and f.floor and f.floor > 0 for f in figures), figures
    assert all(f.floor_name == "the same at 60 stage types" for f in figures)
    assert [g.name.split(":")[0] for g in goals] == [
        "scrape /metrics over 80 stage types, 30 scrapers at once",
        "scrape /metrics over 80 stage types <= 1.1x the size at 60",
    ]
    size = figures[2]
    assert size.ratio is not None
    assert size.ratio <= 1.1  # both beyond the 50 types with series of their own
