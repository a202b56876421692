"""Access management commands: issuing and revoking bearer tokens, each an event in the log."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from jobnik.domain.commands import command
from jobnik.domain.errors import TokenExists, TokenNotFound
from jobnik.domain.ports import Store
from jobnik.domain.principals import Principal, Role
from jobnik.domain.tokens import Token, check_name, token_id


@dataclass(frozen=True)
class Issued:
    """A token just issued, with its bearer string: shown once, stored nowhere."""

    token: Token
    bearer: str


class TokenCommands:
    """Issue and revoke tokens (the command line calls them with the database at hand)."""

    store: Store
    clock: Callable[[], datetime]

    @command
    def issue_token(
        self,
        name: str,
        role: Role,
        *,
        stage_types: Sequence[str] = (),
        expires_at: datetime | None = None,
        by: Principal,
    ) -> Issued:
        """A new token; TokenExists when the name was ever used."""
        check_name(name)
        now = self.clock()
        with self.store.session(write=True) as s:
            try:
                s.token(token_id(name))
            except TokenNotFound:
                pass
            else:
                raise TokenExists(f"a token named '{name}' exists or existed: pick another name")
            token, bearer = Token.issue(
                name=name,
                role=role,
                stage_types=stage_types,
                expires_at=expires_at,
                now=now,
                actor=by,
            )
            s.save(token)
        return Issued(token, bearer)

    @command
    def revoke_token(self, name: str, *, by: Principal) -> bool:
        """Refuse the token from now on; False when it was revoked already."""
        with self.store.session(write=True) as s:
            token = s.token(token_id(name))
            revoked = token.revoke(self.clock(), by)
            s.save(token)
        return revoked
