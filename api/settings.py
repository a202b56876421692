"""Every `JOBNIK_*` setting of the server, in one place: read once at the entry point, passed down.

`Settings()` reads the process environment (what `jobnik serve` and the ASGI factory do);
`Settings.from_env(mapping)` reads a given mapping alone (tests, tools that build an environment).
Nothing below the entry points reads `os.environ`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from jobnik.domain.archives import MAX_PERIOD_SECONDS
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.errors import InvalidRetryPolicy
from jobnik.domain.statuses import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_CHILD_JOBS,
    MAX_LEASE_SECONDS,
)
from jobnik.projections.store.archive_files import writable_directory
from jobnik.projections.store.config import library_env

PREFIX = "JOBNIK_"
# Responses are serialised by pydantic, which refuses values nested deeper than about 250
# levels; a stored payload sits a few levels down in the deepest response (a job with its
# stages and their tasks), so what a request may nest stays well under that.
MAX_SERVABLE_DEPTH = 200
# The stuck-work thresholds' bounds (settings and GET /v1/stuck's parameters): beyond them
# "now minus the threshold" leaves the calendar, and the counts leave the stores' integers.
MAX_STUCK_LEASE_EXPIRIES = 1_000_000
MAX_STUCK_IDLE_SECONDS = 1e9
# The longest period or interval a setting names (about 31 years): now plus or minus it stays in
# the calendar, and a timer waiting it stays in the platform's range.
MAX_TIMER_SECONDS = 1e9
# The longest a read with min_position may wait for its projection: a request, not a timer.
MAX_POSITION_WAIT = 60.0
# The share of its time an archive run spends archiving through a backlog (api/archives.py).
ARCHIVE_SHARE: Final = 0.1
# Settings whose value an error message leaves out (a database URL may hold a password).
UNQUOTED = frozenset({"database_url"})


class InvalidSettings(ValueError):
    """Settings that do not parse, each named by the variable it is read from."""


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
        DEFAULT_LEASE_SECONDS,
        ge=1,
        le=MAX_LEASE_SECONDS,
        description="a dequeue's lease when the client names none",
    )
    retry_initial_seconds: float | None = Field(
        None,
        gt=0,
        description="the server's retry policy, for stages and jobs that name none: the first "
        "retry's wait in seconds; unset: a retried task may be dequeued again at once",
    )
    retry_coefficient: float = Field(
        2.0, ge=1, description="the server's retry policy: each retry waits this many times more"
    )
    retry_max_seconds: float = Field(
        3600.0, gt=0, description="the server's retry policy: the longest wait, in seconds"
    )
    retry_jitter: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the server's retry policy: up to this fraction of a wait is taken off",
    )
    idempotency_ttl: float = Field(
        24 * 3600.0,
        gt=0,
        le=MAX_TIMER_SECONDS,
        description="seconds an Idempotency-Key is remembered",
    )
    sweep_interval: float = Field(
        5.0,
        ge=0,
        le=MAX_TIMER_SECONDS,
        description="seconds between sweeper rounds; 0: this process runs none",
    )
    catchup_interval: float = Field(
        0.2,
        ge=0,
        le=MAX_TIMER_SECONDS,
        description="seconds between catch-up rounds; 0: this process runs none",
    )
    min_position_wait: float = Field(
        5.0,
        ge=0,
        le=MAX_POSITION_WAIT,
        description="the longest a read with min_position waits for its projection",
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
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host names the server answers to (its requests' Host header, the port aside),"
        " comma-separated; `*.example.com` matches the names under example.com; none: any host",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins browsers may call the API from, comma-separated (none by default)",
    )
    metrics: bool = Field(
        True, description="serve GET /metrics and /service-metrics, and record the metrics"
    )
    metrics_stage_types: int = Field(
        50,
        ge=0,
        le=10_000,
        description="stage types with series of their own in the metrics (those with the most "
        'tasks); the others are counted under stage_type="__other__" (0: every one)',
    )
    metrics_schedules: int = Field(
        100,
        ge=0,
        le=10_000,
        description="schedules with series of their own in the metrics (those that fired most); "
        'the others are counted under schedule="__other__"',
    )
    stuck_lease_expiries: int = Field(
        3,
        ge=0,
        le=MAX_STUCK_LEASE_EXPIRIES,
        description="GET /v1/stuck: a task whose lease expired more times than this",
    )
    stuck_job_idle_seconds: float = Field(
        3600.0,
        gt=0,
        le=MAX_STUCK_IDLE_SECONDS,
        description="GET /v1/stuck: an unfinished job with no event for longer",
    )
    stuck_queue_idle_seconds: float = Field(
        600.0,
        gt=0,
        le=MAX_STUCK_IDLE_SECONDS,
        description="GET /v1/stuck: queued tasks waiting with no dequeue for longer",
    )
    stuck_schedule_failures: int = Field(
        3,
        ge=1,
        le=MAX_STUCK_LEASE_EXPIRIES,
        description="GET /v1/stuck: a schedule whose latest ended runs failed this many times "
        "in a row",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="`jobnik serve`'s log lines: readable text, or one JSON object each"
    )
    # Standard variables of Prometheus' and OpenTelemetry's client libraries, read under their
    # own names. The libraries read the rest of theirs (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_
    # HEADERS, OTEL_TRACES_SAMPLER, ...) themselves.
    prometheus_multiproc_dir: str | None = Field(
        None,
        validation_alias="PROMETHEUS_MULTIPROC_DIR",
        description="where several server processes keep their metrics (`jobnik serve` sets it)",
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        None,
        validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="an OTLP/HTTP collector: spans go to its /v1/traces",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        None,
        validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        description="the OTLP/HTTP traces URL itself (wins over the endpoint)",
    )
    otel_traces_exporter: str | None = Field(
        None,
        validation_alias="OTEL_TRACES_EXPORTER",
        description="otlp (with an endpoint), console, or none",
    )
    otel_sdk_disabled: bool = Field(
        False, validation_alias="OTEL_SDK_DISABLED", description="true: no traces at all"
    )

    max_body_bytes: int = Field(
        1024 * 1024, ge=1024, description="the largest request body (413 PAYLOAD_TOO_LARGE)"
    )
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="`jobnik serve`: the largest request line and headers, in bytes (431 "
        "HEADERS_TOO_LARGE, connection closed)",
    )
    max_headers: int = Field(
        100,
        ge=10,
        description="`jobnik serve`: the most header fields of a request (431 HEADERS_TOO_LARGE)",
    )
    header_timeout: float = Field(
        10.0,
        gt=0,
        description="`jobnik serve`: seconds a request's line and headers may take to arrive "
        "(408 REQUEST_TIMEOUT, connection closed)",
    )
    body_timeout: float = Field(
        30.0,
        gt=0,
        description="`jobnik serve`: seconds a request's body may take to arrive after its headers "
        "(408 REQUEST_TIMEOUT, connection closed)",
    )
    max_json_depth: int = Field(
        64,
        ge=2,
        le=MAX_SERVABLE_DEPTH,
        description="how deep a request body's JSON may nest (400 JSON_TOO_DEEP)",
    )
    max_string_length: int = Field(
        1024 * 1024,
        ge=1,
        description="the longest string, in characters, in a request body (400 STRING_TOO_LONG)",
    )
    max_tasks_per_request: int = Field(
        1000,
        ge=1,
        description="tasks one POST /v1/stages/{stageId}/tasks creates (400 TOO_MANY_TASKS)",
    )
    max_log_lines: int = Field(
        1000,
        ge=1,
        description="lines one POST /v1/tasks/{taskId}/logs appends (400 TOO_MANY_LOG_LINES)",
    )
    max_batch_size: int = Field(
        DEFAULT_MAX_BATCH,
        ge=1,
        description="tasks one batched dequeue (`count`) claims or one PUT /v1/tasks/status "
        "reports (400 BATCH_TOO_LARGE)",
    )
    max_child_jobs: int = Field(
        DEFAULT_MAX_CHILD_JOBS,
        ge=1,
        le=10_000,
        description="child jobs one task may create (409 TOO_MANY_CHILD_JOBS beyond)",
    )
    group_commit: bool = Field(
        True,
        description="worker dequeues and reports that arrive while another is being written "
        "share the next transaction (off: one transaction each)",
    )
    max_page_size: int = Field(
        100, ge=1, description="the largest page_size of a paged list (400 VALIDATION_ERROR)"
    )
    max_waiters: int = Field(
        64,
        ge=1,
        description="reads waiting on min_position at once in a process (503 TOO_MANY_WAITERS)",
    )
    max_streams: int = Field(
        64,
        ge=1,
        description="live event streams open at once in a process (503 TOO_MANY_STREAMS)",
    )
    max_streams_per_token: int = Field(
        16,
        ge=1,
        description="live event streams one token has open at once in a process "
        "(503 TOO_MANY_STREAMS)",
    )
    event_page_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="stored bytes of events a page of history, of the feed or of a stream's "
        "read carries at most (a page holds at least one event)",
    )
    list_shape: Literal["page", "array"] = Field(
        "page",
        description="the four filtered lists without page or page_size: {total, items} pages "
        "(Jobnik 1.x) or plain arrays (SDK 0.3.x)",
    )

    retention_seconds: int | None = Field(
        None,
        gt=0,
        le=MAX_PERIOD_SECONDS,
        description="ended jobs are archived this many seconds after they end (unless their "
        "name has a period of its own); unset: kept in the live log forever",
    )
    archive_dir: str | None = Field(
        None,
        description="the directory (local or mounted) archived jobs' files are written to; "
        "an archive run needs it, and it must be a writable directory",
    )
    archive_interval: float = Field(
        60.0, gt=0, le=MAX_TIMER_SECONDS, description="seconds between the sweeper's archive runs"
    )
    archive_batch: int = Field(100, ge=1, le=10_000, description="jobs one archive run takes")
    archive_share: float = Field(
        ARCHIVE_SHARE,
        gt=0,
        le=1,
        description="the most of its time archiving takes through a backlog: after a batch of t "
        "seconds it waits t * (1 - share) / share before the next; 1: batch after batch",
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise InvalidSettings(_problems(type(self), exc)) from None

    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, value: str) -> str:
        library_env({"JOBNIK_DATABASE_URL": value})  # raises ValueError on what it cannot read
        return value

    @field_validator("archive_dir")
    @classmethod
    def _a_writable_directory(cls, value: str | None) -> str | None:
        if value is not None:
            writable_directory(value)  # raises ValueError, in one sentence
        return value

    @model_validator(mode="after")
    def _archives_somewhere(self) -> Settings:
        if self.retention_seconds is not None and self.archive_dir is None:
            raise ValueError("JOBNIK_RETENTION_SECONDS needs JOBNIK_ARCHIVE_DIR, where jobs go")
        return self

    @model_validator(mode="after")
    def _a_retry_policy(self) -> Settings:
        self.retry_policy()  # refused with the other settings, before anything is opened
        return self

    @field_validator("cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [o.strip() for o in value.split(",") if o.strip()]
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings `env` holds, and the defaults for the rest (the process environment is
        not read)."""
        # `_build_sources` is BaseSettings' own hook for the sources to read.
        return cls(_build_sources=((_GivenEnv(cls, env),), {}))

    def retry_policy(self) -> RetryPolicy | None:
        """The server's retry policy (JOBNIK_RETRY_*), None when JOBNIK_RETRY_INITIAL_SECONDS
        is unset: Jobnik's behaviour, a retry at once."""
        if self.retry_initial_seconds is None:
            return None
        try:
            return RetryPolicy(
                self.retry_initial_seconds,
                self.retry_coefficient,
                self.retry_max_seconds,
                self.retry_jitter,
            )
        except InvalidRetryPolicy as exc:
            raise InvalidSettings(f"JOBNIK_RETRY_*: {exc.message}") from None

    def library_env(self) -> dict[str, str]:
        """The eventsourcing library's persistence settings for this database."""
        return library_env(self.as_env())

    def as_env(self) -> dict[str, str]:
        """These settings as the variables they are read from (`JOBNIK_*`, and the libraries'
        own names), for child processes and library settings."""
        fields = type(self).model_fields
        return {
            _variable(name, fields[name].validation_alias): (
                ",".join(value) if isinstance(value, list) else str(value)
            )
            for name, value in self.model_dump().items()
            if value is not None and value != []
        }


def _variable(name: str, alias: object) -> str:
    return alias if isinstance(alias, str) else PREFIX + name.upper()


def _problems(cls: type[BaseSettings], error: ValidationError) -> str:
    """One sentence naming each variable that does not parse, what was wrong, and its value
    (not for UNQUOTED ones): `JOBNIK_LEASE_SECONDS='abc': Input should be a valid integer`."""
    fields = cls.model_fields
    out = []
    for e in error.errors():
        if not e["loc"]:  # (a rule between settings: its message names them)
            out.append(str(e["msg"]).removeprefix("Value error, "))
            continue
        name = str(e["loc"][0])
        field = fields.get(name)
        variable = _variable(name, field.validation_alias) if field else name
        value = "" if name in UNQUOTED else f"={e['input']!r}"
        out.append(f"{variable}{value}: {str(e['msg']).removeprefix('Value error, ')}")
    return "; ".join(out)


class _GivenEnv(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env  # read by _load_env_vars, which the base class's __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v.strip() for k, v in self._given.items() if v.strip()}
