"""The jobs page's filters, read from its query string: blank fields are no filter, and a value
the API would refuse is refused the same way (400 INVALID_REQUEST)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from jobnik.domain.errors import InvalidRequest
from jobnik.domain.statuses import JobStatus, Priority

PAGE_SIZE = 20
FIELDS = ("status", "name", "priority", "created_from", "created_to", "parent", "page")


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def _when(name: str, value: str | None) -> datetime | None:
    """A datetime-local field's value (no offset: UTC) or an ISO 8601 date-time."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"request/query/{name} must be a date-time") from None
    parsed = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    try:
        parsed.astimezone(UTC)  # the query compares in UTC
    except OverflowError:
        raise InvalidRequest(f"request/query/{name} is out of range") from None
    return parsed


def _choice(name: str, value: str | None, kind: type[JobStatus] | type[Priority]) -> str | None:
    if value is not None and value not in kind.__members__.values():
        allowed = ", ".join(kind.__members__.values())
        raise InvalidRequest(f"request/query/{name} must be one of {allowed}")
    return value


@dataclass(frozen=True)
class JobFilters:
    status: str | None = None
    name: str | None = None
    priority: str | None = None
    created_from: str | None = None
    created_to: str | None = None
    parent: str | None = None
    page: int = 1

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> JobFilters:
        unknown = sorted(set(query) - set(FIELDS))
        if unknown:
            raise InvalidRequest(f"Unknown query parameter '{unknown[0]}'")
        values = {f: _blank(query.get(f)) for f in FIELDS}
        page = values.pop("page") or "1"
        if not re.fullmatch("[0-9]{1,10}", page) or not 1 <= int(page) <= 10**9:
            raise InvalidRequest("request/query/page must be a whole number from 1")
        found = cls(**values, page=int(page))
        found.query_args()  # refuse what the query could not take
        return found

    def query_args(self) -> dict[str, Any]:
        """The filters as `Views.jobs` keywords."""
        parent = None
        if self.parent is not None:
            try:
                parent = UUID(self.parent)
            except ValueError:
                raise InvalidRequest("request/query/parent must be a job id") from None
        return {
            "status": _choice("status", self.status, JobStatus),
            "name": self.name,
            "priority": _choice("priority", self.priority, Priority),
            "from_date": _when("created_from", self.created_from),
            "end_date": _when("created_to", self.created_to),
            "parent_job_id": parent,
        }

    def link(self, **change: Any) -> str:
        """This page's query string with `change` applied (the page back to 1 unless given)."""
        changed = replace(self, **{"page": 1, **change})
        return "?" + urlencode({k: v for k, v in asdict(changed).items() if v not in (None, 1)})
