"""What `jobnik serve` prepares around uvicorn: the directory several server processes keep
their metrics in."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def metrics_directory(workers: int, given: str | None) -> Iterator[str | None]:
    """The PROMETHEUS_MULTIPROC_DIR of a run with `workers` processes: `given` (the operator's,
    emptied of an earlier run's files first, kept afterwards), else for several processes a
    fresh temporary directory, removed when the run ends, else None (one process keeps its
    metrics in memory)."""
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):  # counts of a previous run would add to ours
            stale.unlink()
        yield str(directory)
        return
    if workers <= 1:
        yield None
        return
    made = tempfile.mkdtemp(prefix="jobnik-metrics-")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)
