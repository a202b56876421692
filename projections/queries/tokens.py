"""Reading the tokens read model: every token, for the API's authentication and the listings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobnik.projections.inline.tables import TOKENS
from jobnik.projections.store.base import SqlStore


@dataclass(frozen=True)
class TokenRow:
    """One token as `tokens_v1` holds it (the secret's hash, never the secret)."""

    name: str
    role: str
    stage_types: tuple[str, ...]
    expires_at: datetime | None
    secret_hash: str
    issued_at: datetime
    issued_by: str
    revoked_at: datetime | None
    revoked_by: str | None

    def active(self, now: datetime) -> bool:
        """Neither revoked nor expired at `now`."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


class TokenViews:
    """Every token, by name."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def all(self) -> list[TokenRow]:
        with self.store.cursor(write=False) as cur:
            rows = cur.all(
                "SELECT name, role, stage_types, expires_at, secret_hash, issued_at, issued_by, "
                f"revoked_at, revoked_by FROM {TOKENS} ORDER BY name"
            )
        return [TokenRow(**{**r, "stage_types": tuple(r["stage_types"])}) for r in rows]
