"""Who asks: principals, their roles, and what each role may do, as data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from jobnik.domain.errors import Forbidden


class Role(StrEnum):
    """A token's role. reader < producer < operator < admin; worker stands apart."""

    READER = "reader"
    PRODUCER = "producer"
    OPERATOR = "operator"
    ADMIN = "admin"
    WORKER = "worker"


class Permission(StrEnum):
    """What a route needs (api/permissions.py names one per route)."""

    READ = "read"  # every GET and the streams
    PRODUCE = "produce"  # create jobs, stages, tasks; priority, metadata, pause/resume/abort/finish
    OPERATE = "operate"  # delete, redispatch, reruns
    WORK = "work"  # dequeue, heartbeat, report, hand back, log (within the token's stage types)
    ADMIN = "admin"  # tokens, projection rebuilds


# A worker reads too: its handler reads its task's stage and job (both SDKs do).
GRANTS: Final[Mapping[Role, frozenset[Permission]]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.PRODUCER: frozenset({Permission.READ, Permission.PRODUCE}),
    Role.OPERATOR: frozenset({Permission.READ, Permission.PRODUCE, Permission.OPERATE}),
    Role.ADMIN: frozenset(Permission),
    Role.WORKER: frozenset({Permission.READ, Permission.WORK}),
}


def roles_with(permission: Permission) -> list[Role]:
    """The roles granted `permission`, in the order of `Role`."""
    return [r for r in Role if permission in GRANTS[r]]


@dataclass(frozen=True)
class Principal:
    """Who caused an event: a token (its name and role), or, with no role, one of the built-in
    actors (`api`, `worker` when access control is off; `system` for the sweeper and cascades);
    with the trace id of the request it asks in, when that request carried one."""

    name: str
    role: Role | None = None
    stage_types: frozenset[str] = frozenset()  # a worker token's types; empty: every type
    trace_id: str | None = None  # 32 hex digits (W3C trace context)

    @property
    def authenticated(self) -> bool:
        """Whether this is a token's principal (access control is on)."""
        return self.role is not None

    def may(self, permission: Permission) -> bool:
        """Whether the principal holds `permission` (built-in actors hold every one)."""
        return self.role is None or permission in GRANTS[self.role]

    def check_stage_type(self, stage_type: str) -> None:
        """Forbidden unless the principal may work on tasks of `stage_type`."""
        if self.stage_types and stage_type not in self.stage_types:
            raise Forbidden(
                f"token '{self.name}' may work on stage types {sorted(self.stage_types)} only, "
                f"not '{stage_type}'"
            )

    def __str__(self) -> str:
        return self.name


def token_principal(name: str, role: str, stage_types: Iterable[str] = ()) -> Principal:
    return Principal(name, Role(role), frozenset(stage_types))


class Actor:
    """The built-in actors (no token): what events record when access control is off."""

    API: Final = Principal("api")
    WORKER: Final = Principal("worker")
    SYSTEM: Final = Principal("system")


# Token names that would read as a built-in actor in the audit log.
RESERVED_NAMES: Final = frozenset({"api", "worker", "system", "cli"})
