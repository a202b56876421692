"""The `jobnik bench` suite's sizes, its per-backend context (`Ctx`) and its database helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobnik.scripts.bench.databases import fresh_database
from jobnik.scripts.bench.report import Figure, Goal


@dataclass(frozen=True)
class Sizes:
    lifecycle_tasks: int
    ks: tuple[int, ...]
    http_tasks: int
    http_ks: tuple[int, ...]
    bulk_tasks: int
    depth: int
    depth_types: int
    depth_samples: int
    rebuild_small: int
    rebuild_large: int
    hot_tasks: int
    hot_workers: int = 8
    observe_rounds: int = 3
    console_jobs: int = 100_000


FULL = Sizes(
    20_000, (1, 2, 4), 5_000, (1, 4), 100_000, 1_000_000, 1_000, 50, 30_000, 300_000, 20_000
)
QUICK = Sizes(
    80, (1, 2, 4), 80, (4,), 10_000, 5_000, 50, 20, 1_000, 6_000, 100, console_jobs=10_000
)
TINY = Sizes(12, (1, 4), 12, (2,), 1_500, 200, 2, 6, 1_000, 1_000, 16, 4, 1, 300)  # the test's


def say(line: str = "") -> None:
    print(line, flush=True)


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(what)


@dataclass
class Ctx:
    """Where and how big: one backend's run."""

    backend: str
    sizes: Sizes
    pg_url: str
    tmp: Path
    url: str | None = None  # the database every figure but depth and rebuild runs in
    api_processes: int = 1  # uvicorn processes of the HTTP figure (PostgreSQL)
    logs: dict[int, str] = field(default_factory=dict)  # rebuild logs by size, across backends
    figures: list[Figure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)

    def add(self, name: str, value: float, floor: float | None, unit: str, **kw: Any) -> Figure:
        f = Figure(name, self.backend, value, floor, unit, **kw)
        self.figures.append(f)
        say(
            f"# {self.backend} {name}: {value:,.2f} {unit}"
            + (f" (floor {floor:,.2f})" if floor is not None else "")
        )
        return f

    def goal(self, name: str, met: bool, detail: str) -> None:
        self.goals.append(Goal(name, self.backend, met, detail))

    def share(
        self, name: str, rates: dict[bool, list[float]], floor_name: str, note: str, goal: float
    ) -> None:
        """An A/B figure of tasks/s: the best run with the feature on (`rates[True]`) beside the
        best without, and the goal that it keeps at least `goal` of it."""
        f = self.add(
            name, max(rates[True]), max(rates[False]), "tasks/s", floor_name=floor_name, note=note
        )
        self.goal(
            f"{name.split(',')[-1].strip()} >= {goal:.0%} of without",
            (f.ratio or 0) >= goal,
            f"{f.ratio:.0%} of {floor_name}",
        )

    @contextmanager
    def database(self, label: str) -> Iterator[str]:
        """The backend's database (figures use distinct stage types and floor tables)."""
        assert self.url is not None
        yield self.url


@contextmanager
def suite_database(backend: str, pg_url: str, tmp: Path) -> Iterator[str]:
    """A fresh, empty database for one backend's figures; dropped (deleted) afterwards."""
    if backend == "sqlite":
        path = tmp / "suite.db"
        yield f"sqlite:///{path}"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    with fresh_database(pg_url, f"bench_suite_{os.getpid()}") as url:
        yield url
