"""Idempotency-Key: a creating command runs at most once per key.

The key's row is written in the write transaction of the command it guards (a nested
`SqlStore.session(write=True)` joins the open one), so a crash leaves both or neither. That
transaction takes the writer lock before it looks the key up, so a second request with the same
key waits for the first to commit and then finds its row: two concurrent requests create once
and get the same answer. Rows older than the TTL count as absent and are purged (at lookup, and
by the sweeper). The table is not a projection of events: a rebuild neither reads nor writes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from jobnik.api.positions import note_written
from jobnik.domain.commands import run_retrying
from jobnik.domain.errors import IdempotencyKeyReused
from jobnik.projections.store.base import SqlStore

DEFAULT_TTL: Final = 24 * 3600.0
IDEMPOTENCY_KEYS: Final = "jobnik_idempotency_keys"

SELECT_KEY: Final = (
    "SELECT fingerprint, status, body, position FROM jobnik_idempotency_keys "
    "WHERE idempotency_key = {key}"
)
INSERT_KEY: Final = (
    "INSERT INTO jobnik_idempotency_keys "
    "(idempotency_key, fingerprint, status, body, position, created_at) "
    "VALUES ({key}, {fingerprint}, {status}, {body}, {position}, {created_at})"
)
DELETE_EXPIRED_KEY: Final = (
    "DELETE FROM jobnik_idempotency_keys WHERE idempotency_key = {key} AND created_at < {cutoff}"
)
DELETE_EXPIRED: Final = "DELETE FROM jobnik_idempotency_keys WHERE created_at < {cutoff}"


def fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 of method, path and the body as canonical JSON (key order and spacing ignored)."""
    try:
        canonical = json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except ValueError:  # not JSON: validation refuses it anyway; hash the bytes as they came
        canonical = body
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))  # length-prefixed: no ambiguous joins
        digest.update(part)
    return digest.hexdigest()


@dataclass(frozen=True)
class Answer:
    """A response recorded under a key: its status, its JSON body, and the log position reached."""

    status: int
    body: str
    position: int | None
    replayed: bool


class IdempotencyKeys:
    """Runs a command at most once per key, recording its answer in the command's transaction."""

    def __init__(
        self,
        store: SqlStore,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store, self.ttl, self.clock = store, ttl, clock

    def _sql(self, template: str) -> str:
        p = self.store.dialect.param
        names = ("key", "fingerprint", "status", "body", "position", "created_at", "cutoff")
        return template.format(**{n: p(n) for n in names})

    def _cutoff(self, now: datetime) -> Any:
        return self.store.dialect.dump("created_at", now - timedelta(seconds=self.ttl))

    def once(self, key: str, fingerprint: str, run: Callable[[], tuple[int, str]]) -> Answer:
        """The answer recorded under `key`, or `run()`'s, recorded in the same transaction.

        Raises IdempotencyKeyReused when the key was recorded with another fingerprint. When
        `run` raises, nothing is recorded and nothing it wrote is committed.
        """
        return run_retrying(lambda: self._once(key, fingerprint, run))

    def _once(self, key: str, fingerprint: str, run: Callable[[], tuple[int, str]]) -> Answer:
        now = self.clock()
        with self.store.session(write=True) as s:
            s.lock()  # the writer lock first: same-key requests queue
            s.cur.execute(self._sql(DELETE_EXPIRED_KEY), {"key": key, "cutoff": self._cutoff(now)})
            row = s.cur.one(self._sql(SELECT_KEY), {"key": key})
            if row is not None:
                if row["fingerprint"] != fingerprint:
                    raise IdempotencyKeyReused
                if row["position"] is not None:  # a replay reached the original's position
                    note_written(row["position"])
                return Answer(row["status"], row["body"], row["position"], replayed=True)
            status, body = run()  # its write sessions join this one
            s.cur.execute(
                self._sql(INSERT_KEY),
                {
                    "key": key,
                    "fingerprint": fingerprint,
                    "status": status,
                    "body": body,
                    "position": s.position,
                    "created_at": self.store.dialect.dump("created_at", now),
                },
            )
            return Answer(status, body, s.position, replayed=False)

    def purge(self) -> int:
        """Delete every expired key; returns how many."""
        with self.store.cursor(write=True, lock=False) as cur:
            cur.execute(self._sql(DELETE_EXPIRED), {"cutoff": self._cutoff(self.clock())})
            return int(cur.raw.rowcount or 0)
