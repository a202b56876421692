"""Every `JOBNIK_*` setting of the server, in one place: read once at the entry point, passed down.

`Settings()` reads the process environment (what `jobnik serve` and the ASGI factory do);
`Settings.from_env(mapping)` reads a given mapping alone (tests, tools that build an environment).
Nothing below the entry points reads `os.environ`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from jobnik.domain.statuses import DEFAULT_LEASE_SECONDS
from jobnik.projections.store.config import library_env

PREFIX = "JOBNIK_"


class Settings(BaseSettings):
    """The server's settings; each field is the variable `JOBNIK_<FIELD NAME IN CAPITALS>`."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, extra="ignore", frozen=True, env_ignore_empty=True
    )

    database_url: str = Field(
        "sqlite:///jobnik.db",
        description="postgresql://user:password@host:port/db, or sqlite:///path/to/file.db",
    )
    pool_size: int = Field(5, ge=1, description="PostgreSQL connections each process keeps")
    db_timeout: int = Field(30, ge=1, description="seconds to wait for a connection or lock")
    lease_seconds: int = Field(
        DEFAULT_LEASE_SECONDS, ge=1, description="a dequeue's lease when the client names none"
    )
    idempotency_ttl: float = Field(
        24 * 3600.0, gt=0, description="seconds an Idempotency-Key is remembered"
    )
    sweep_interval: float = Field(
        5.0, ge=0, description="seconds between sweeper rounds; 0: this process runs none"
    )
    catchup_interval: float = Field(
        0.2, ge=0, description="seconds between catch-up rounds; 0: this process runs none"
    )
    min_position_wait: float = Field(
        5.0, ge=0, description="the longest a read with min_position waits for its projection"
    )
    rebuild_on_start: Literal["auto", "off"] = Field(
        "auto", description="rebuild read models an older version built, at start-up"
    )
    rebuild_processes: int | None = Field(
        None, ge=1, description="processes a PostgreSQL rebuild replays with (default: CPUs)"
    )
    auth: Literal["tokens", "off"] | None = Field(
        None,
        description="access control: tokens (a bearer token on every request), off (none); "
        "unset: tokens once any token has been issued, open before that (docs/security.md)",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins browsers may call the API from, comma-separated (none by default)",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [o.strip() for o in value.split(",") if o.strip()]
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings `env` holds, and the defaults for the rest (the process environment is
        not read)."""
        # `_build_sources` is BaseSettings' own hook for the sources to read; mypy sees only
        # the fields in the signature.
        return cls(_build_sources=((_GivenEnv(cls, env),), {}))  # type: ignore[call-arg]

    def library_env(self) -> dict[str, str]:
        """The eventsourcing library's persistence settings for this database."""
        return library_env(self.as_env())

    def as_env(self) -> dict[str, str]:
        """These settings as `JOBNIK_*` variables (for child processes and library settings)."""
        return {
            PREFIX + name.upper(): ",".join(value) if isinstance(value, list) else str(value)
            for name, value in self.model_dump().items()
            if value is not None and value != []
        }


class _GivenEnv(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env  # read by _load_env_vars, which the base class's __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v.strip() for k, v in self._given.items() if v.strip()}
