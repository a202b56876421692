"""Find a job, stage or task by its id, or by the first digits of it (the console shows ids by
their first eight): one probe of each table's primary key, a range between the smallest and the
largest id with those digits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from uuid import UUID

from jobnik.domain.errors import InvalidRequest
from jobnik.projections.store.base import SqlStore

MIN_DIGITS: Final = 4
LIMIT: Final = 10  # matches shown at most, per kind
HEX: Final = re.compile(r"^[0-9a-f]+$")
Kind = Literal["job", "stage", "task"]
# (kind, what each table's row says of its place: the job, the stage, a name)
TABLES: Final[dict[Kind, str]] = {
    "job": "SELECT id, id AS job_id, NULL AS stage_id, name FROM jobs_v1",
    "stage": "SELECT id, job_id, id AS stage_id, type AS name FROM stages_v1",
    "task": "SELECT id, job_id, stage_id, stage_type AS name FROM tasks_v1",
}


@dataclass(frozen=True)
class Found:
    """A job, stage or task whose id matched: where it lives, and its job's name or its type."""

    kind: Kind
    id: UUID
    job_id: UUID
    stage_id: UUID | None
    name: str


def id_range(text: str) -> tuple[UUID, UUID]:
    """The smallest and largest ids that `text` (an id, or its first digits) stands for;
    InvalidRequest when it is neither."""
    digits = text.strip().lower().removeprefix("urn:uuid:").strip("{}").replace("-", "")
    if not HEX.match(digits) or not MIN_DIGITS <= len(digits) <= 32:
        raise InvalidRequest(
            f"'{text.strip()[:100]}' is not an id: give a job's, stage's or task's id, or its "
            f"first {MIN_DIGITS} to 32 hexadecimal digits (e.g. 3f2a9c1e)"
        )
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


class Lookup:
    """Read-only: which jobs, stages and tasks an id or its first digits names."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.d = store.dialect

    def find(self, text: str) -> list[Found]:
        """Jobs, then stages, then tasks whose id is `text` or starts with its digits, by id
        (at most `LIMIT` of each kind)."""
        low, high = id_range(text)
        p = self.d.param
        params = {"low": self.d.dump("id", low), "high": self.d.dump("id", high)}
        found: list[Found] = []
        with self.store.cursor(write=False) as cur:
            for kind, select in TABLES.items():
                rows = cur.all(
                    f"{select} WHERE id BETWEEN {p('low')} AND {p('high')} "
                    f"ORDER BY id LIMIT {LIMIT}",
                    params,
                )
                found += [Found(kind, r["id"], r["job_id"], r["stage_id"], r["name"]) for r in rows]
        return found
