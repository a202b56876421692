from __future__ import annotations

import pytest

from jobnik.api.settings import InvalidSettings, Settings
from jobnik.domain.statuses import MAX_LEASE_SECONDS


def test_settings_from_a_mapping_read_only_that_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBNIK_POOL_SIZE", "9")

    settings = Settings.from_env({"JOBNIK_SWEEP_INTERVAL": "0", "JOBNIK_LEASE_SECONDS": " 60 "})

    assert (settings.sweep_interval, settings.lease_seconds, settings.pool_size) == (0, 60, 5)


def test_settings_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBNIK_POOL_SIZE", "9")

    assert Settings().pool_size == 9


def test_a_bad_setting_is_refused_naming_it() -> None:
    with pytest.raises(InvalidSettings, match="JOBNIK_REBUILD_ON_START='sometimes': "):
        Settings.from_env({"JOBNIK_REBUILD_ON_START": "sometimes"})


def test_each_setting_that_does_not_parse_is_named_by_its_variable_not_its_field() -> None:
    with pytest.raises(InvalidSettings) as refused:
        Settings.from_env({"JOBNIK_LEASE_SECONDS": "abc", "OTEL_SDK_DISABLED": "maybe"})

    message = str(refused.value)
    assert "JOBNIK_LEASE_SECONDS='abc': Input should be a valid integer" in message
    assert "OTEL_SDK_DISABLED='maybe'" in message
    assert "lease_seconds" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("mysql://app:s3cret@db/jobs", "starts with postgresql:// or sqlite:///, not mysql:"),
        ("postgresql://app:s3cret@db:port/jobs", "Port could not be cast"),
        ("postgresql://app:s3cret@[::1/jobs", "Invalid IPv6 URL"),
    ],
)
def test_a_database_url_that_does_not_parse_is_refused_without_showing_it(
    url: str, why: str
) -> None:
    with pytest.raises(InvalidSettings, match=r"^JOBNIK_DATABASE_URL: ") as refused:
        Settings.from_env({"JOBNIK_DATABASE_URL": url})

    assert why in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_settings_round_trip_through_variables() -> None:
    settings = Settings.from_env({"JOBNIK_DATABASE_URL": "sqlite:///x.db", "JOBNIK_POOL_SIZE": "3"})

    assert Settings.from_env(settings.as_env()) == settings
    assert settings.library_env()["SQLITE_DBNAME"] == "x.db"


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("3", 3), (" 2 ", 2)])
def test_the_number_of_rebuild_processes_is_read_from_the_environment(
    value: str, expected: int
) -> None:
    assert Settings.from_env({"JOBNIK_REBUILD_PROCESSES": value}).rebuild_processes == expected


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_number_of_rebuild_processes_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(InvalidSettings, match="JOBNIK_REBUILD_PROCESSES"):
        Settings.from_env({"JOBNIK_REBUILD_PROCESSES": value})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JOBNIK_STUCK_JOB_IDLE_SECONDS", "inf"),  # now minus it: before year 1
        ("JOBNIK_STUCK_QUEUE_IDLE_SECONDS", "1e11"),
        ("JOBNIK_STUCK_LEASE_EXPIRIES", str(2**63)),  # beyond the stores' integers
    ],
)
def test_a_stuck_threshold_no_scrape_could_use_is_refused(variable: str, value: str) -> None:
    with pytest.raises(InvalidSettings, match=variable):
        Settings.from_env({variable: value})


@pytest.mark.parametrize(("value", "why"), [("0", "greater than 0"), ("1.5", "less than or equal")])
def test_an_archive_share_outside_0_to_1_is_refused(value: str, why: str) -> None:
    with pytest.raises(InvalidSettings, match=f"JOBNIK_ARCHIVE_SHARE='{value}': .*{why}"):
        Settings.from_env({"JOBNIK_ARCHIVE_SHARE": value})


def test_the_archive_share_is_a_tenth_unless_set() -> None:
    assert Settings.from_env({}).archive_share == 0.1
    assert Settings.from_env({"JOBNIK_ARCHIVE_SHARE": "1"}).archive_share == 1.0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JOBNIK_LEASE_SECONDS", str(10**12)),  # now plus it: after year 9999 (every dequeue)
        ("JOBNIK_IDEMPOTENCY_TTL", "inf"),  # now minus it: before year 1 (every keyed POST)
        ("JOBNIK_IDEMPOTENCY_TTL", "1e300"),
        ("JOBNIK_SWEEP_INTERVAL", "1e300"),  # beyond a timer's range: the thread would die
        ("JOBNIK_CATCHUP_INTERVAL", "inf"),
        ("JOBNIK_ARCHIVE_INTERVAL", "1e300"),
        ("JOBNIK_MIN_POSITION_WAIT", "inf"),  # a read that would never end
        ("JOBNIK_MIN_POSITION_WAIT", "61"),
    ],
)
def test_a_period_no_clock_or_timer_could_use_is_refused_naming_it(
    variable: str, value: str
) -> None:
    with pytest.raises(InvalidSettings, match=f"{variable}='{value}': .*less than or equal"):
        Settings.from_env({variable: value})


def test_the_default_lease_may_be_as_long_as_a_dequeue_may_ask_for() -> None:
    week = Settings.from_env({"JOBNIK_LEASE_SECONDS": str(7 * 24 * 3600)}).lease_seconds
    assert week == MAX_LEASE_SECONDS == 7 * 24 * 3600


def test_a_read_may_wait_a_minute_for_its_projection() -> None:
    assert Settings.from_env({"JOBNIK_MIN_POSITION_WAIT": "60"}).min_position_wait == 60.0


@pytest.mark.parametrize("value", ["0", "10001"])
def test_child_jobs_per_task_are_bounded(value: str) -> None:
    with pytest.raises(InvalidSettings, match="JOBNIK_MAX_CHILD_JOBS"):
        Settings.from_env({"JOBNIK_MAX_CHILD_JOBS": value})
    assert Settings.from_env({}).max_child_jobs == 1_000


@pytest.mark.parametrize(
    ("variables", "why"),
    [
        ({"JOBNIK_RETRY_INITIAL_SECONDS": "10", "JOBNIK_RETRY_MAX_SECONDS": "5"}, "maxSeconds"),
        ({"JOBNIK_RETRY_INITIAL_SECONDS": "1", "JOBNIK_RETRY_COEFFICIENT": "1001"}, "coefficient"),
        ({"JOBNIK_RETRY_INITIAL_SECONDS": "2e7"}, "initialSeconds"),
    ],
)
def test_a_retry_policy_that_cannot_be_is_refused_as_the_settings_are_read(
    variables: dict[str, str], why: str
) -> None:
    with pytest.raises(InvalidSettings, match=f"^JOBNIK_RETRY_\\*: retry policy: {why}"):
        Settings.from_env(variables)
