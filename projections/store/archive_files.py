"""Archive files: a job's events as gzip-compressed NDJSON (one event a line, as its history
shows it), named by the job, with the sha256 of the file's bytes as its checksum.

A file is written under a temporary name, synced, renamed to its name and its directory
synced: once `write` returns, the file is whole on disk, and a crash before leaves at most a
temporary file (the next run writes it again). Files are compressed without a timestamp, so the
same events give the same bytes, and the same checksum, whenever they are written.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Final

CHUNK: Final = 1024 * 1024


def writable_directory(path: str) -> None:
    """Nothing if `path` is a directory this process can write files into; else ValueError,
    in one sentence."""
    directory = Path(path)
    if not directory.is_dir():
        raise ValueError(f"{path} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ValueError(f"{path} is not writable ({exc.strerror})") from None


def checksum(path: Path) -> str:
    """`sha256:<hex>` of the file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def write(directory: Path, name: str, lines: Iterable[str]) -> str:
    """Write `lines` (each one JSON document, without its newline) to `directory`/`name`,
    compressed and synced (see the module); returns the file's checksum."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
                for line in lines:
                    packed.write(line.encode() + b"\n")
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)
    return checksum(path)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> Iterator[str]:
    """The lines of an archive file, without their newlines; OSError when it cannot be read
    (gzip's own errors are OSErrors too)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        stream: IO[str] = f
        for line in stream:
            yield line.rstrip("\n")
