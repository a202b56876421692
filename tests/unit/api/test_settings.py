from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobnik.api.settings import Settings


def test_settings_from_a_mapping_read_only_that_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBNIK_POOL_SIZE", "9")

    settings = Settings.from_env({"JOBNIK_SWEEP_INTERVAL": "0", "JOBNIK_LEASE_SECONDS": " 60 "})

    assert (settings.sweep_interval, settings.lease_seconds, settings.pool_size) == (0, 60, 5)


def test_settings_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBNIK_POOL_SIZE", "9")

    assert Settings().pool_size == 9


def test_a_bad_setting_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="rebuild_on_start"):
        Settings.from_env({"JOBNIK_REBUILD_ON_START": "sometimes"})


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
    with pytest.raises(ValidationError, match="rebuild_processes"):
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
    with pytest.raises(ValidationError, match=variable.removeprefix("JOBNIK_").lower()):
        Settings.from_env({variable: value})
