"""The tokens read model (`tokens_v1`): one row per token, for the API's lookups and listings.

Rows carry the secret's hash, never the secret (it is in no event either)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.tokens import Token
from jobnik.projections.inline.ops import Insert, Op, Update
from jobnik.projections.inline.tables import TOKENS


def _token_issued(e: Any, _: int) -> list[Op]:  # (Token.TokenIssued: mypy misses `actor`)
    return [
        Insert(
            TOKENS,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "name": e.name,
                "role": e.role,
                "stage_types": e.stage_types,
                "expires_at": e.expires_at,
                "secret_hash": e.secret_hash,
                "issued_at": e.timestamp,
                "issued_by": e.actor,
                "update_time": e.timestamp,
                "revoked_at": None,
                "revoked_by": None,
            },
        )
    ]


def _token_revoked(e: Token.TokenRevoked, _: int) -> list[Op]:
    values = {"revoked_at": e.timestamp, "revoked_by": e.actor}
    return [
        Update(
            TOKENS,
            {"id": e.originator_id},
            {"version": e.originator_version, "update_time": e.timestamp, **values},
        )
    ]


TOKEN_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    Token.TokenIssued: _token_issued,
    Token.TokenRevoked: _token_revoked,
}
