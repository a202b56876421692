"""PostgreSQL: a rebuild's writes to one projection's shadow tables, by a thread while the next
page folds.

Folding a page is Python; writing it is mostly waiting for PostgreSQL. `Writer` runs a
projection's statements on a connection of its own, one transaction per page, while the caller
goes on with the next page: its `page()` hands out a `Deferred` cursor whose `execute`,
`executemany` and `later` queue work and return at once, and whose reads (`one`, `all`,
`raw_all`) wait for the statements queued before them and return their rows, so the caller sees
exactly what a plain cursor would show. Only the rebuild writes shadow tables, and each writer
writes one projection's, so nothing else can observe the order.

At most `depth` pages are queued or being written (memory stays a few pages). The page
transactions commit asynchronously (`synchronous_commit = off`): the swap's own commit, later,
is synchronous and makes everything before it durable; a crash before the swap leaves only
shadows, which the next rebuild drops. The first error a statement raises is raised in the caller
by its next call (the page's transaction is rolled back and later work is skipped).
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import orjson
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_dumps

from jobnik.domain.errors import DatabaseError
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.errors import wrapped

DEPTH: Final = 2  # pages queued or in flight per writer
Work = Callable[[Cursor], Any]


class _Mark:
    """End of a page: commit it, or roll it back."""

    __slots__ = ("commit",)

    def __init__(self, commit: bool) -> None:
        self.commit = commit


_COMMIT: Final = _Mark(True)
_ROLLBACK: Final = _Mark(False)
_STOP: Final = object()


class _Call:
    """Work whose result the caller waits for (a read)."""

    __slots__ = ("done", "error", "result", "work")

    def __init__(self, work: Work) -> None:
        self.work = work
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _RolledBack(Exception):
    pass


class Writer:
    """A thread and a connection writing one projection's pages, in order, one transaction each."""

    def __init__(
        self, connection_kwargs: dict[str, Any], dialect: Dialect, depth: int = DEPTH
    ) -> None:
        self.kwargs, self.dialect = connection_kwargs, dialect
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._slots = threading.Semaphore(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="jobnik-rebuild-writer", daemon=True)

    def __enter__(self) -> Writer:
        kwargs = {**self.kwargs, "row_factory": dict_row}
        with wrapped():
            self._conn: psycopg.Connection[Any] = psycopg.connect(autocommit=True, **kwargs)
        set_json_dumps(dumps, self._conn)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._jobs.put(_STOP)
        self._thread.join()
        with contextlib.suppress(psycopg.Error):
            self._conn.close()
        if exc[0] is None:
            self._check()

    @contextmanager
    def page(self) -> Iterator[Cursor]:
        """A cursor for one page's work; the page commits when the block ends without error."""
        self._check()
        self._slots.acquire()
        try:
            yield Deferred(self)
        except BaseException:
            self._jobs.put(_ROLLBACK)
            raise
        self._jobs.put(_COMMIT)

    def put(self, work: Work | _Call) -> None:
        self._check()
        self._jobs.put(work)

    def call(self, work: Work) -> Any:
        call = _Call(work)
        self.put(call)
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            if isinstance(job, _Mark):  # an empty page
                pass
            elif self._error is not None:
                self._skip(job)
            else:
                try:
                    self._transaction(job)
                except _RolledBack:
                    pass
                except BaseException as e:  # noqa: BLE001 - raised in the caller by its next call
                    self._error = e if not isinstance(e, psycopg.Error) else _wrapped(e)
                    self._skip(None)
            self._slots.release()

    def _transaction(self, job: Any) -> None:
        """Run a page's work, `job` first, up to its mark, in one transaction."""
        with self._conn.transaction(), self._conn.cursor() as raw:
            cur = Cursor(raw, self.dialect)
            cur.execute("SET LOCAL synchronous_commit = off")
            while not isinstance(job, _Mark):
                if isinstance(job, _Call):
                    try:
                        job.result = job.work(cur)
                    except BaseException as e:
                        job.error = e if not isinstance(e, psycopg.Error) else _wrapped(e)
                        raise
                    finally:
                        job.done.set()
                else:
                    job(cur)
                job = self._jobs.get()
            if not job.commit:
                raise _RolledBack

    def _skip(self, job: Any) -> None:
        """After an error: fail the waiting calls of the rest of the page (up to its mark)."""
        while True:
            if job is None:
                job = self._jobs.get()
            if job is _STOP:
                self._jobs.put(_STOP)  # seen again by the loop, which then returns
                return
            if isinstance(job, _Mark):
                return
            if isinstance(job, _Call):
                job.error = self._error
                job.done.set()
            job = None


def dumps(value: Any) -> bytes | str:
    """JSON for a jsonb value: orjson (a tenth of a rebuild's writer threads went to the json
    module's dumps), else the json module for what orjson refuses (integers beyond 64 bits, say),
    as the live path writes it. PostgreSQL keeps the parsed value, not the text, so the rows are
    the live path's."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value)


def _wrapped(e: psycopg.Error) -> DatabaseError:
    """`e` as the server's error, raised later in another thread (`wrapped` raises at once)."""
    error = DatabaseError(f"database error: {e}")
    error.__cause__ = e
    return error


class Deferred(Cursor):
    """A cursor whose writes a `Writer` runs later, in order; its reads wait for them."""

    def __init__(self, writer: Writer) -> None:
        super().__init__(None, writer.dialect)
        self.writer = writer

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        self.writer.put(lambda cur: cur.execute(sql, params))

    def executemany(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        self.writer.put(lambda cur: cur.executemany(sql, params))

    def later(self, work: Work) -> None:
        """Run `work(cursor)` in order with the statements (its arguments must not change)."""
        self.writer.put(work)

    def one(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self.writer.call(lambda cur: cur.one(sql, params))
        return row

    def raw_all(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.writer.call(lambda cur: cur.raw_all(sql, params))
        return rows

    def all(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.writer.call(lambda cur: cur.all(sql, params))
        return rows
