"""The sandbox's clock: a fixed "now" and the time zone every date of the benchmark is read in.

ToolSandbox reads `datetime.now()` and the machine's local zone; an episode here reads one fixed instant in one
zone instead, so a scenario's "tomorrow 5PM" and the agent's `get_current_timestamp()` agree, replays repeat, and
the relative timestamps of the base state (a message sent 1 hour ago) are the same every run.
Left out: time passing within an episode (every call sees the same now; the benchmark's few seconds of drift are
what its 1-second tolerances absorb).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

DEFAULT_NOW = datetime(2024, 6, 5, 10, 0, 0, tzinfo=UTC).timestamp()  # a Wednesday morning


@dataclass(frozen=True, kw_only=True)
class Clock:
    now: float = DEFAULT_NOW  # POSIX seconds
    zone: tzinfo = UTC

    def datetime(self, timestamp: float) -> datetime:
        return datetime.fromtimestamp(timestamp, self.zone)

    def timestamp(self, year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
        """The POSIX time of a wall-clock date in this zone (ValueError for a date that does not exist)."""
        return datetime(year, month, day, hour, minute, second, tzinfo=self.zone).timestamp()

    def ago(self, **delta: float) -> float:
        return (self.datetime(self.now) - timedelta(**delta)).timestamp()

    def day_at(self, day: str, hour: int) -> float:
        """`hour` o'clock on a day named relative to now: `today`, `tomorrow`, or `next_iso_weekday_N`
        (N = 1 for Monday; today when today is that weekday, as the benchmark's helper counts)."""
        today = self.datetime(self.now)
        if day == "today":
            shift = 0
        elif day == "tomorrow":
            shift = 1
        elif day.startswith("next_iso_weekday_") and day[-1:] in "1234567" and len(day) == 18:
            shift = (int(day[-1]) - today.isoweekday()) % 7
        else:
            raise ValueError(f"unknown day {day!r}: expected today, tomorrow or next_iso_weekday_1..7")
        date = today + timedelta(days=shift)
        return self.timestamp(date.year, date.month, date.day, hour)
