"""When a schedule fires: its nominal times, from a cron expression in a time zone or from a fixed
interval. Pure: no clock, no I/O.

A cron expression (five fields, or an alias such as `@daily`; croniter parses and steps it) is
read in the schedule's time zone, as wall-clock times there. Each matching wall-clock time is one
nominal time, an instant, by this rule where the zone changes its offset:

- a wall-clock time that does not exist that day (skipped when clocks move forward) fires at the
  first instant after the gap, the moment the clocks jumped: 02:30 on a day whose clocks jump from
  02:00 to 03:00 fires at 03:00. Several such times fire once (they are the same instant).
- a wall-clock time that occurs twice (clocks moved back) fires once, at its first occurrence.

An interval schedule fires every `interval` seconds counted from the Unix epoch (every 3600 s: on
the hour, UTC), whatever the zone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from jobnik.domain.errors import InvalidCron, InvalidInterval, InvalidTimezone, TimingRequired

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND: Final = timedelta(microseconds=1)
MAX_INTERVAL: Final = 2**31 - 1  # seconds (about 68 years)
# Beyond any offset change a zone makes in one go: where a search for the wall-clock times around
# an instant starts.
MAX_SHIFT: Final = timedelta(hours=3)
ALIASES: Final = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
# A field croniter fills with a random value (R, R(1-5), R/15), drawn again each time it reads the
# expression: no two readings would agree on the nominal times.
RANDOM_FIELD: Final = re.compile(r"(?:^|\s)r(?:$|[\s(/])", re.IGNORECASE)


@cache
def _iana_names() -> frozenset[str]:
    """The IANA time zone names the system (or the tzdata package) holds; not the host's own
    zone (`localtime`), nor `posixrules` or the leap-second variants (`right/...`): what they
    mean depends on the machine that reads them."""
    return frozenset(available_timezones()) - {"localtime"}


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; InvalidTimezone when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTimezone(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def _wall(instant: datetime, tz: ZoneInfo) -> datetime:
    """The wall-clock time (naive) in `tz` at `instant`."""
    return instant.astimezone(tz).replace(tzinfo=None)


def instant_of(wall: datetime, tz: ZoneInfo) -> datetime:
    """The nominal instant of the wall-clock time `wall` in `tz` (the module's rule), in UTC."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if _wall(first, tz) == wall:  # it exists (fold 0: its first occurrence, if it is twice)
        return first
    # In a gap: fold 0 reads it with the offset before the change, fold 1 with the one after; the
    # gap's end lies between. Found to the second (zones change offsets on whole seconds).
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    lo, hi = min(lo, first), max(lo, first)
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) // 2
        mid = mid.replace(microsecond=0)
        if _wall(mid, tz) >= wall:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class Timing:
    """A cron expression in a time zone, or an interval in seconds: exactly one of the two."""

    cron: str | None
    timezone: str
    interval_seconds: int | None

    def check(self, now: datetime) -> None:
        """Refuse what cannot fire: a named InvalidRequest (InvalidCron, InvalidTimezone,
        InvalidInterval, TimingRequired)."""
        if (self.cron is None) == (self.interval_seconds is None):
            raise TimingRequired
        zone(self.timezone)
        if self.timezone not in _iana_names():
            raise InvalidTimezone(
                f"{self.timezone!r} is not an IANA time zone name: use one such as "
                "'Europe/Berlin' or 'UTC'"
            )
        if self.interval_seconds is not None:
            if not 1 <= self.interval_seconds <= MAX_INTERVAL:
                raise InvalidInterval(
                    f"intervalSeconds must be 1 to {MAX_INTERVAL}, not {self.interval_seconds}"
                )
            return
        assert self.cron is not None
        text = self.cron.strip()
        if RANDOM_FIELD.search(text):
            raise InvalidCron(
                f"{self.cron!r} has a random field (R): a schedule fires at fixed times"
            )
        if not (text.lower() in ALIASES or len(text.split()) == 5) or not croniter.is_valid(text):
            raise InvalidCron(
                f"{self.cron!r} is not a cron expression: five fields (minute hour "
                "day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly"
            )
        try:
            self.next_after(now)
        except CroniterError:
            raise InvalidCron(f"{self.cron!r} never fires (no such date)") from None

    @cached_property
    def _tz(self) -> ZoneInfo:
        return zone(self.timezone)

    def _interval(self) -> timedelta:
        assert self.interval_seconds is not None
        return timedelta(seconds=self.interval_seconds)

    def _periods(self, t: datetime) -> int:
        """Whole intervals from the epoch to `t`."""
        return (t - EPOCH) // self._interval()

    def next_after(self, t: datetime) -> datetime:
        """The first nominal time strictly after `t`."""
        if self.interval_seconds is not None:
            return EPOCH + (self._periods(t) + 1) * self._interval()
        assert self.cron is not None
        tz = self._tz
        # Wall-clock times before t's own map to instants at or before t: start there.
        walls = croniter(self.cron.strip(), _wall(t, tz))
        while True:
            found = instant_of(walls.get_next(datetime), tz)
            if found > t:
                return found

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The latest nominal time at or before `t` (None: none, the expression is too rare
        for croniter's search)."""
        if self.interval_seconds is not None:
            return EPOCH + self._periods(t) * self._interval()
        assert self.cron is not None
        tz = self._tz
        # A wall-clock time a little after t's may still be before t (clocks moved back): start
        # beyond any such shift.
        walls = croniter(self.cron.strip(), _wall(t, tz) + MAX_SHIFT)
        try:
            while True:
                found = instant_of(walls.get_prev(datetime), tz)
                if found <= t:
                    return found
        except CroniterBadDateError:
            return None

    def between(self, after: datetime, until: datetime, limit: int) -> Iterator[datetime]:
        """The nominal times in (`after`, `until`], oldest first, at most `limit`."""
        t = after
        for _ in range(limit):
            t = self.next_after(t)
            if t > until:
                return
            yield t

    def following(self, first: datetime, count: int) -> list[datetime]:
        """`first` and the nominal times after it, `count` in all (fewer when croniter finds no
        later date)."""
        found = [first]
        try:
            while len(found) < count:
                found.append(self.next_after(found[-1]))
        except CroniterError:
            pass
        return found[:count]

    def count(self, after: datetime, until: datetime, limit: int) -> int:
        """How many nominal times (`after`, `until`] holds, counted up to `limit`."""
        if self.interval_seconds is not None:
            return max(0, min(limit, self._periods(until) - self._periods(after)))
        return sum(1 for _ in self.between(after, until, limit))
