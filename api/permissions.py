"""Authorization: each route declares the permission it needs, and one dependency checks it.

A route declares its permission with `openapi_extra=needs(Permission.X)`, next to its path, so
the map of route → permission is the routes themselves (tests/api/test_access_matrix.py walks it)
and the OpenAPI shows it. `authorize`, a dependency of every router, checks the request's
principal (set by the `Authenticate` middleware) against it: 403 FORBIDDEN when its role lacks
it. A route that declares nothing needs ADMIN: a route someone forgot is closed, not open.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Final

from fastapi import Depends, Request
from starlette.routing import BaseRoute

from jobnik.api.schemas import ErrorBody
from jobnik.api.traces import request_trace
from jobnik.domain.errors import Forbidden
from jobnik.domain.principals import Actor, Permission, Principal, roles_with

PERMISSION: Final = "x-jobnik-permission"
ROLES: Final = "x-jobnik-roles"
PRINCIPAL_KEY: Final = "jobnik.principal"  # the scope key the middleware sets
BEARER: Final = "bearer"


def needs(permission: Permission) -> dict[str, Any]:
    """A route's `openapi_extra`: the permission it needs, and the roles that hold it."""
    return {PERMISSION: str(permission), ROLES: [str(r) for r in roles_with(permission)]}


def permission_of(route: BaseRoute | None) -> Permission:
    extra = getattr(route, "openapi_extra", None) or {}
    return Permission(extra.get(PERMISSION, Permission.ADMIN))


async def authorize(request: Request) -> Principal:
    """The principal of the request, if its role may use this route; else Forbidden. With
    access control off, the built-in actor (`worker` on worker routes, `api` elsewhere). It
    carries the request's trace id, which every event the request causes records."""
    permission = permission_of(request.scope.get("route"))
    principal: Principal | None = request.scope.get(PRINCIPAL_KEY)
    if principal is None:
        principal = Actor.WORKER if permission is Permission.WORK else Actor.API
    elif not principal.may(permission):
        roles = ", ".join(roles_with(permission))
        raise Forbidden(
            f"token '{principal.name}' ({principal.role}) may not do this: it needs the "
            f"{permission} permission ({roles})"
        )
    traced = request_trace(request)
    if traced is None:
        return principal
    return replace(principal, trace_id=traced[0][3:35])


PrincipalDep = Annotated[Principal, Depends(authorize)]

SECURITY_SCHEME: Final = {
    "type": "http",
    "scheme": "bearer",
    "description": "A token made with `jobnik tokens create`: `Authorization: Bearer NAME.SECRET`. "
    "Required when access control is on (JOBNIK_AUTH).",
}
UNAUTHENTICATED: Final = {
    "description": "UNAUTHENTICATED: the bearer token is missing, unknown, expired or revoked "
    "(header WWW-Authenticate: Bearer)",
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
}
FORBIDDEN: Final = {
    "description": "FORBIDDEN: the token's role does not include this operation's permission, "
    "or (workers) the task's stage type is not among the token's, or its attempt belongs to "
    "another token",
}


def document_security(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the bearer scheme, each operation's roles, and its 401 and 403 to `schema`."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[BEARER] = SECURITY_SCHEME
    components.setdefault("schemas", {}).setdefault("ErrorBody", ErrorBody.model_json_schema())
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            roles = operation.get(ROLES)
            if roles is None:  # a public path
                continue
            operation["security"] = [{BEARER: []}]
            line = f"Roles: {', '.join(roles)}."
            description = operation.get("description", "")
            if line not in description:
                operation["description"] = f"{description}\n\n{line}".strip()
            responses = operation.setdefault("responses", {})
            responses["401"] = {**UNAUTHENTICATED, "content": content}
            responses["403"] = {**FORBIDDEN, "content": content}
    return schema
