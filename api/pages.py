"""The four filtered lists (jobs, stages, a stage's tasks, tasks) in both of Jobnik's shapes,
and every list item rendered on its own.

Jobnik's 1.x manager and SDK page these lists: `{"total": N, "items": [...]}` with `page`
(1-based) and `page_size` (1 to JOBNIK_MAX_PAGE_SIZE, default 10). Its 0.3.x SDK reads them as
plain arrays of every match. A request that names `page` or `page_size` gets a page; one that
names neither gets JOBNIK_LIST_SHAPE's shape (`page` by default, `array` for 0.3.x clients).
A plain array is streamed: read in chunks of CHUNK items, each in its own short transaction and
in creation order, so the server's memory stays flat however long the answer is.

An item that cannot be rendered (a row stored before the input gate existed, say) is rendered
again with its free-form payloads made readable (api/readable.py) and logged; it never takes the
list, the page or the stream that holds it down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeVar

from fastapi import Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from jobnik.api.history_schemas import EventOut
from jobnik.api.openapi import setting_maximum
from jobnik.api.readable import readable_payloads
from jobnik.api.schemas import INT32_MAX, OutModel
from jobnik.api.settings import Settings
from jobnik.domain.errors import InvalidRequest
from jobnik.domain.tasks import Task
from jobnik.projections.queries.audit import Entry, Page
from jobnik.projections.queries.views import Listing, Views, Window

log = logging.getLogger(__name__)

T = TypeVar("T")
CHUNK: Final = 500
DEFAULT_PAGE_SIZE: Final = 10


@dataclass(frozen=True)
class Paging:
    """How a request wants its list: a page (number, size) or the whole array."""

    shape: Literal["page", "array"]
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE

    def window(self, newest_first: bool = False) -> Window:
        """The page's part of a list."""
        offset = (self.page - 1) * self.page_size
        return Window(offset=offset, limit=self.page_size, newest_first=newest_first)


PageQuery = Annotated[
    int | None, Query(ge=1, le=INT32_MAX, description="the page, from 1; past the last: no items")
]
PageSizeQuery = Annotated[
    int | None,
    Query(
        ge=1,
        le=INT32_MAX,
        description="items per page, 1 to JOBNIK_MAX_PAGE_SIZE (default 100); default 10",
        json_schema_extra=setting_maximum("max_page_size"),
    ),
]


async def paging(
    request: Request, page: PageQuery = None, page_size: PageSizeQuery = None
) -> Paging:
    settings: Settings = request.app.state.settings
    if page_size is not None and page_size > settings.max_page_size:
        raise InvalidRequest(f"request/query/page_size must be <= {settings.max_page_size}")
    if page is None and page_size is None and settings.list_shape == "array":
        return Paging("array")
    return Paging("page", page or 1, page_size or DEFAULT_PAGE_SIZE)


async def a_page(
    request: Request, page: PageQuery = None, page_size: PageSizeQuery = None
) -> Paging:
    """A page whatever JOBNIK_LIST_SHAPE says: jobnik's own lists have no plain-array shape."""
    return await paging(request, page or 1, page_size)


PagingDep = Annotated[Paging, Depends(paging)]
PageDep = Annotated[Paging, Depends(a_page)]


def render(build: Callable[[], BaseModel], what: str) -> bytes:
    """One item as JSON. An item that fails is built again with readable payloads, logged."""
    try:
        return build().model_dump_json(by_alias=True).encode()
    except Exception:  # a bad stored row: anything the model or its serialiser raised
        log.exception("%s could not be rendered as stored", what, extra={"action": "unreadable"})
    with readable_payloads():
        return build().model_dump_json(by_alias=True).encode()


def render_one(build: Callable[[], BaseModel], what: str) -> Response:
    """`render` as the whole response."""
    return Response(render(build, what), media_type="application/json")


def answer(
    views: Views,
    listing: Listing[T],
    paging: Paging,
    out: Callable[[T], OutModel],
    name: Callable[[T], str],
    newest_first: bool = False,
) -> Response:
    """`listing` in the shape `paging` asks for, each item rendered by `render`; a page's
    items newest first if asked (a plain array is always oldest first)."""

    def one(item: T) -> bytes:
        return render(lambda: out(item), name(item))

    if paging.shape == "page":
        window = paging.window(newest_first)
        items = views.read(listing, window)
        total = views.total(listing)
        body = b'{"total":%d,"items":[%s]}' % (total, b",".join(one(i) for i in items))
        return Response(body, media_type="application/json")
    return StreamingResponse(_array(views, listing, one), media_type="application/json")


def chunked_array(
    read: Callable[[int, int], list[T]], one: Callable[[T], bytes], chunk: int = CHUNK
) -> Response:
    """A plain array of what `read(offset, limit)` finds, read `chunk` items at a time (each
    read its own short transaction) and streamed; the first read's errors (a 404) before any
    byte."""
    first = read(0, chunk)

    def chunks() -> Iterator[list[T]]:
        items, offset = first, 0
        yield items
        while len(items) == chunk:
            offset += len(items)
            items = read(offset, chunk)
            yield items

    return StreamingResponse(_joined(chunks(), one), media_type="application/json")


def _array(views: Views, listing: Listing[T], one: Callable[[T], bytes]) -> Iterator[bytes]:
    def chunks() -> Iterator[list[T]]:
        items = views.read(listing, Window(limit=CHUNK))
        yield items
        while len(items) == CHUNK:
            items = views.read(listing, Window(limit=CHUNK, after=listing.key(items[-1])))
            yield items

    return _joined(chunks(), one)


def _joined(chunks: Iterable[list[T]], one: Callable[[T], bytes]) -> Iterator[bytes]:
    """A JSON array of the `chunks`' items, each rendered by `one`, a chunk at a time."""
    yield b"["
    first = True
    for items in chunks:
        if items:
            yield (b"" if first else b",") + b",".join(one(i) for i in items)
            first = False
    yield b"]"


def page_schema(item: type[Any]) -> dict[str, Any]:
    """The OpenAPI answer of a list in both shapes."""
    ref = {"$ref": f"#/components/schemas/{item.__name__}"}
    return {
        "description": "a page ({total, items}), or with JOBNIK_LIST_SHAPE=array and neither "
        "page nor page_size, every match as a plain array",
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {
                                "total": {"type": "integer", "minimum": 0},
                                "items": {"type": "array", "items": ref},
                            },
                            "required": ["total", "items"],
                            "additionalProperties": False,
                        },
                        {"type": "array", "items": ref},
                    ]
                }
            }
        },
    }


def render_event(e: Entry) -> str:
    """One event of the log as JSON (`render`)."""
    return render(lambda: EventOut.of(e), f"event {e.position}").decode()


def event_page(page: Page) -> Response:
    """A page of events, each rendered on its own (`EventPage`'s shape)."""
    return rendered_event_page([render_event(e) for e in page.items], page.next)


def rendered_event_page(items: list[str], next: int | None) -> Response:
    """A page of events rendered already (`EventPage`'s shape)."""
    nxt = "null" if next is None else str(int(next))
    return Response(f'{{"items":[{",".join(items)}],"next":{nxt}}}', media_type="application/json")


def task_name(task: Task) -> str:
    return f"task {task.id}"
