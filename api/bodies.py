"""Request bodies after the input gate (api/input_gate.py): the routes validate the JSON value the
gate parsed (not a second parse), and an array a route bounds by a setting is counted by the
gate, before anything validates one of its items.

A body's array is bounded where its type is declared: `MostItems` in its `Annotated` metadata,
on the body itself or on a field of the body's model. `Bounds.of` finds them on the app's
routes; the gate refuses a longer array at once with the bound's error (a body that is an array
is counted on its text, unparsed), and the OpenAPI document states each bound as the array's
`maxItems` (api/openapi.py).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from jobnik.api.input_gate import parsed_body
from jobnik.api.input_values import array_length
from jobnik.api.schemas import MostItems
from jobnik.api.settings import Settings


@dataclass(frozen=True)
class Bound:
    """One route's bounded array: the body itself (`key` None) or the body's field `key`."""

    route: APIRoute
    key: str | None
    items: MostItems
    most: int

    def check(self, length: int | None) -> None:
        if length is not None and length > self.most:
            where = "request/body" if self.key is None else f"request/body/{self.key}"
            raise self.items.error(
                f"{where} has {length} {self.items.noun}; at most {self.most} per request"
            )


class Bounds:
    """The bounded arrays of an app's routes, checked on a request's body: a body that is an
    array on its text, before it is parsed; an array in a field on the parsed body."""

    def __init__(self, bounds: Sequence[Bound], depth: int) -> None:
        self.bounds, self.depth = list(bounds), depth

    @classmethod
    def of(cls, routes: Sequence[BaseRoute], settings: Settings) -> Bounds:
        bounds = [
            Bound(route, key, items, items.most(settings))
            for route in routes
            if isinstance(route, APIRoute)
            for key, items in declared(route)
        ]
        return cls(bounds, settings.max_json_depth)

    def _of(self, scope: Scope) -> Iterator[Bound]:
        return (b for b in self.bounds if b.route.matches(scope)[0] is Match.FULL)

    def unparsed(self, scope: Scope, body: bytes) -> None:
        for bound in self._of(scope):
            if bound.key is None:
                bound.check(array_length(body, self.depth))

    def parsed(self, scope: Scope, value: Any) -> None:
        for bound in self._of(scope):
            if bound.key is not None and isinstance(value, dict):
                array = value.get(bound.key)
                bound.check(len(array) if isinstance(array, list) else None)


def declared(route: APIRoute) -> Iterator[tuple[str | None, MostItems]]:
    """The bounds `route`'s body declares: (None, bound) for the body, (alias, bound) for a
    field of its model."""
    field = route.body_field
    if field is None:
        return
    for meta in field.field_info.metadata:
        if isinstance(meta, MostItems):
            yield None, meta
    kind = field.field_info.annotation
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        for name, info in kind.model_fields.items():
            for meta in info.metadata:
                if isinstance(meta, MostItems):
                    yield info.alias or name, meta


class GatedRequest(Request):
    """A request whose JSON body is the value the input gate parsed from it."""

    async def json(self) -> Any:
        return parsed_body(self.scope, await self.body())


class GatedRoute(APIRoute):
    """An APIRoute whose handler reads the body through `GatedRequest` (FastAPI's documented
    way to change how a route reads its request)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def gated(request: Request) -> Response:
            return await handler(GatedRequest(request.scope, request.receive))

        return gated
