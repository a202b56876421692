"""The Token aggregate: a bearer token's issue and revocation, as events (never its secret).

A token's bearer string is `<name>.<secret>`: the name says which token it claims to be, the
secret (256 random bits from `secrets`) proves it. Only the secret's SHA-256 is stored; a fast
hash suffices because the secret is random, not chosen by a person, so there is nothing to
guess from the hash. Names are unique for ever (a token's id is derived from its name), so a
name in the audit log always means one token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final
from uuid import UUID, uuid5

from jobnik.domain.base import Entity, cause
from jobnik.domain.errors import InvalidRequest
from jobnik.domain.principals import RESERVED_NAMES, Principal, Role

NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SECRET_BYTES: Final = 32
_NAMESPACE: Final = UUID("5d0f6a38-7b52-4f0e-9a3c-0b6f1d8e2c47")


def token_id(name: str) -> UUID:
    """The id of the token named `name` (the same name always gives the same id)."""
    return uuid5(_NAMESPACE, name)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Whether `secret` hashes to `secret_hash`, compared in constant time."""
    return hmac.compare_digest(hash_secret(secret), secret_hash)


def split_bearer(bearer: str) -> tuple[str, str] | None:
    """(name, secret) of a bearer string, or None when it is not of the form `name.secret`."""
    name, dot, secret = bearer.partition(".")
    if not dot or not secret or not NAME_RE.match(name):
        return None
    return name, secret


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidRequest(
            f"token name {name!r} must be 1-64 letters, digits, '-' or '_', starting with a "
            "letter or digit"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidRequest(f"token name {name!r} is reserved for a built-in actor")


class Token(Entity):
    """A bearer token: its name, role, stage types (worker tokens), expiry, and revocation."""

    if TYPE_CHECKING:  # set by the events' apply()
        name: str
        role: str
        stage_types: list[str]
        expires_at: datetime | None
        secret_hash: str
        revoked: bool

    class TokenIssued(Entity.Created):
        """Issued by `actor`; `secret_hash` is the SHA-256 of its secret."""

        name: str
        role: str
        stage_types: list[str]
        expires_at: datetime | None
        secret_hash: str

        def apply(self, token: Token) -> None:
            token.name, token.role, token.stage_types = self.name, self.role, self.stage_types
            token.expires_at, token.secret_hash = self.expires_at, self.secret_hash
            token.revoked = False

    class TokenRevoked(Entity.Event):
        """Revoked by `actor`: refused from now on."""

        name: str

        def apply(self, token: Token) -> None:
            token.revoked = True

    @classmethod
    def issue(
        cls,
        *,
        name: str,
        role: Role,
        stage_types: Sequence[str],
        expires_at: datetime | None,
        now: datetime,
        actor: Principal,
    ) -> tuple[Token, str]:
        """A new token and its bearer string (`name.secret`), which is nowhere else."""
        check_name(name)
        role = Role(role)
        if stage_types and role is not Role.WORKER:
            raise InvalidRequest("stage types limit worker tokens only")
        if any(not t for t in stage_types):
            raise InvalidRequest("a stage type must not be empty")
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("a token's expiry must be in the future")
        secret = secrets.token_urlsafe(SECRET_BYTES)
        token = cls._create(
            cls.TokenIssued,
            id=token_id(name),
            timestamp=now,
            reason=None,
            **cause(actor),
            name=name,
            role=str(role),
            stage_types=sorted(set(stage_types)),
            expires_at=expires_at,
            secret_hash=hash_secret(secret),
        )
        return token, f"{name}.{secret}"

    def revoke(self, now: datetime, actor: Principal) -> bool:
        """False (no event) when already revoked."""
        if self.revoked:
            return False
        self._emit(self.TokenRevoked, now, actor, name=self.name)
        return True
