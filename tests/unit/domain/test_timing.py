"""Nominal times: cron expressions in a time zone (its clock changes included), and intervals."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from jobnik.domain.errors import InvalidCron, InvalidInterval, InvalidTimezone, TimingRequired
from jobnik.domain.timing import Timing

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def local(times: list[datetime]) -> list[str]:
    return [t.astimezone(BERLIN).isoformat() for t in times]


def test_a_nightly_time_that_does_not_exist_fires_once_at_the_end_of_the_gap() -> None:
    # 2026-03-29: Berlin's clocks jump from 02:00 to 03:00; 02:30 does not exist that night.
    nightly = Timing("30 2 * * *", "Europe/Berlin", None)
    fires = list(
        nightly.between(
            datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC), 10
        )
    )
    assert local(fires) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_a_nightly_time_that_occurs_twice_fires_once_at_its_first_occurrence() -> None:
    # 2026-10-25: Berlin's clocks go back from 03:00 to 02:00; 02:30 happens twice.
    nightly = Timing("30 2 * * *", "Europe/Berlin", None)
    fires = list(
        nightly.between(
            datetime(2026, 10, 23, 12, tzinfo=UTC), datetime(2026, 10, 27, tzinfo=UTC), 10
        )
    )
    assert local(fires) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    second_occurrence = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 +01:00
    assert nightly.last_at_or_before(second_occurrence) == fires[1]
    assert nightly.next_after(fires[1]) == fires[2]


def test_several_times_in_the_gap_are_one_fire() -> None:
    every_half_hour = Timing("0,30 * * * *", "Europe/Berlin", None)
    fires = every_half_hour.between(
        datetime(2026, 3, 29, 0, 15, tzinfo=UTC), datetime(2026, 3, 29, 2, 0, tzinfo=UTC), 10
    )
    assert local(list(fires)) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:00, 02:30 and 03:00: one instant, one fire
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]


def test_an_interval_counts_from_the_epoch_in_utc() -> None:
    hourly = Timing(None, "Europe/Berlin", 3600)
    assert hourly.next_after(datetime(2026, 1, 1, 10, 20, tzinfo=UTC)) == datetime(
        2026, 1, 1, 11, tzinfo=UTC
    )
    assert hourly.last_at_or_before(datetime(2026, 1, 1, 11, tzinfo=UTC)) == datetime(
        2026, 1, 1, 11, tzinfo=UTC
    )
    assert hourly.count(NOW, datetime(2026, 1, 2, tzinfo=UTC), 1000) == 24
    assert hourly.count(NOW, datetime(2026, 1, 2, tzinfo=UTC), 10) == 10


@pytest.mark.parametrize(
    ("timing", "error"),
    [
        (Timing("61 * * * *", "UTC", None), InvalidCron),
        (Timing("* * * * * *", "UTC", None), InvalidCron),  # six fields: not ours
        (Timing("0 0 30 2 *", "UTC", None), InvalidCron),  # 30 February never comes
        (Timing("not cron", "UTC", None), InvalidCron),
        (Timing("@daily", "Mars/Olympus", None), InvalidTimezone),
        (Timing("@daily", "../etc/passwd", None), InvalidTimezone),
        # random fields: croniter draws them again at each reading, so no two agree
        (Timing("R * * * *", "UTC", None), InvalidCron),
        (Timing("0 r(1-5) * * *", "UTC", None), InvalidCron),
        (Timing("R/15 * * * *", "UTC", None), InvalidCron),
        # host files, not IANA names: what they mean depends on the machine that reads them
        (Timing("@daily", "localtime", None), InvalidTimezone),
        (Timing("@daily", "posixrules", None), InvalidTimezone),
        (Timing("@daily", "right/UTC", None), InvalidTimezone),
        (Timing(None, "UTC", 0), InvalidInterval),
        (Timing(None, "UTC", -5), InvalidInterval),
        (Timing(None, "UTC", None), TimingRequired),
        (Timing("@daily", "UTC", 60), TimingRequired),
    ],
)
def test_what_cannot_fire_is_refused_by_name(timing: Timing, error: type[Exception]) -> None:
    with pytest.raises(error):
        timing.check(NOW)


def test_aliases_and_five_fields_are_accepted() -> None:
    for cron in (
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        "*/5 9-17 * * mon-fri",
        "0 0 * mar-apr fri",
    ):
        Timing(cron, "America/New_York", None).check(NOW)
