"""US federal holidays and the `search_holiday` tool (the benchmark reads the `holidays` package's US calendar).

A year's calendar: the eleven federal holidays under their names in that package (Juneteenth from 2021), and an
"(observed)" day for a fixed-date holiday that falls on a weekend (Saturday: the Friday before; Sunday: the Monday
after; New Year's Day on a Saturday is observed on the previous December 31). The search scores every name by
partial ratio and takes the best (ties: the later date), if it scores above 90.
Left out: the package's pre-federal history (holidays before their establishment years other than Juneteenth).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from tracec.trace_rl.envs.toolsandbox.device import is_on
from tracec.trace_rl.envs.toolsandbox.fuzzy import default_process, partial_ratio
from tracec.trace_rl.envs.toolsandbox.toolkit import Call, Tool, ToolError, param


def us_holidays(year: int) -> list[tuple[date, str]]:
    fixed = [(date(year, 1, 1), "New Year's Day"), (date(year, 7, 4), "Independence Day"),
             (date(year, 11, 11), "Veterans Day"), (date(year, 12, 25), "Christmas Day")]
    if year >= 2021:
        fixed.append((date(year, 6, 19), "Juneteenth National Independence Day"))
    days = list(fixed)
    days += [(_nth_weekday(year, 1, 0, 3), "Martin Luther King Jr. Day"),
             (_nth_weekday(year, 2, 0, 3), "Washington's Birthday"), (_last_weekday(year, 5, 0), "Memorial Day"),
             (_nth_weekday(year, 9, 0, 1), "Labor Day"), (_nth_weekday(year, 10, 0, 2), "Columbus Day"),
             (_nth_weekday(year, 11, 3, 4), "Thanksgiving Day")]
    for day, name in fixed:
        observed = _observed(day)
        if observed != day and observed.year == year:
            days.append((observed, f"{name} (observed)"))
    next_new_year = _observed(date(year + 1, 1, 1))
    if next_new_year.year == year:
        days.append((next_new_year, "New Year's Day (observed)"))
    return sorted(days)


def _observed(day: date) -> date:
    return day - timedelta(days=1) if day.weekday() == 5 else day + timedelta(days=1) if day.weekday() == 6 else day


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _last_weekday(year: int, month: int, weekday: int) -> date:
    last = date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)
    return last - timedelta(days=(last.weekday() - weekday) % 7)


def _search_holiday(call: Call, args: dict[str, Any]) -> float | None:
    if not is_on(call, "wifi"):
        raise ToolError("ConnectionError", "Wifi is not enabled")
    year = args["year"] if args["year"] is not None else call.clock.datetime(call.clock.now).year
    wanted = default_process(args["holiday_name"])
    scored = sorted(((partial_ratio(wanted, default_process(name)), day, name) for day, name in us_holidays(year)),
                    reverse=True)
    if scored and scored[0][0] > 90:
        day = scored[0][1]
        return call.clock.timestamp(day.year, day.month, day.day)
    return None


TOOLS = (
    Tool(name="search_holiday", run=_search_holiday,
         doc="Find a US holiday by name. Returns the POSIX timestamp of its date (midnight), or None if no holiday "
             "matches. Needs Wi-Fi.",
         params=(param("holiday_name", "str", "Name of the holiday"),
                 param("year", "int", "Optional. Year to search in; the current year if not given", None,
                       nullable=True))),
)
