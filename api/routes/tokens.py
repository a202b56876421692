"""/v1/tokens: the bearer tokens (admin only): list them, revoke one. Tokens are issued with
`jobnik tokens create`, which alone ever shows a secret."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from jobnik.api.bodies import GatedRoute
from jobnik.api.deps import JobnikDep, reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import Message, OutModel
from jobnik.domain.errors import LastAdminToken, TokenNotFound
from jobnik.domain.principals import Permission, Role
from jobnik.projections.queries.tokens import TokenRow, TokenViews

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=GatedRoute,
    tags=["tokens"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


class TokenOut(OutModel):
    """A token as listed: who issued it, its role and limits; never its secret or hash."""

    name: str
    role: str
    stage_types: list[str]
    expires_at: datetime | None = None
    issued_at: datetime
    issued_by: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    @classmethod
    def of(cls, row: TokenRow) -> TokenOut:
        return cls(
            name=row.name,
            role=row.role,
            stage_types=list(row.stage_types),
            expires_at=row.expires_at,
            issued_at=row.issued_at,
            issued_by=row.issued_by,
            revoked_at=row.revoked_at,
            revoked_by=row.revoked_by,
        )


async def get_token_views(request: Request) -> TokenViews:
    views: TokenViews = request.app.state.token_views
    return views


TokenName = Annotated[str, Path(max_length=64)]
TokenViewsDep = Annotated[TokenViews, Depends(get_token_views)]


@router.get("/tokens", openapi_extra=needs(P.ADMIN))
def list_tokens(views: TokenViewsDep) -> list[TokenOut]:
    """Every token, revoked and expired ones too, by name."""
    return [TokenOut.of(r) for r in views.all()]


def keep_an_admin(request: Request, name: TokenName, views: TokenViewsDep) -> None:
    """Refuses to revoke the last active admin token over the API: no token could then manage
    tokens (the command line, which works on the database, still can)."""
    now = request.app.state.clock()
    if [t.name for t in views.all() if t.role == Role.ADMIN and t.active(now)] == [name]:
        raise LastAdminToken(
            f"token '{name}' is the last active admin token: without it, no token could manage "
            "tokens. Create another admin token first (`jobnik tokens create NAME --role "
            f"admin`); the command line can also revoke it (`jobnik tokens revoke {name}`)."
        )


@router.delete(
    "/tokens/{name}",
    dependencies=[Depends(keep_an_admin)],
    responses=error_answers(TokenNotFound, LastAdminToken),
    openapi_extra=needs(P.ADMIN),
)
def revoke_token(jobnik: JobnikDep, name: TokenName, by: PrincipalDep) -> Message:
    """Revoke a token: every server refuses it within a second. Revoking it again is a no-op.
    The last active admin token is kept (409 LAST_ADMIN_TOKEN)."""
    jobnik.revoke_token(name, by=by)
    return Message(code="TOKEN_REVOKED")
