"""The reminder tools: add, modify, remove and search reminders.

A reminder has content, a POSIX time to remind at (1980..2050, which catches milliseconds given for seconds),
its creation time (now; modifying a reminder renews it) and an optional location. Content is searched fuzzily
(WRatio >= 50), ids and coordinates exactly, times by bounds.
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.envs.toolsandbox.search import Criterion, search, the_row, without
from tracec.trace_rl.envs.toolsandbox.toolkit import (
    NOT_GIVEN,
    Call,
    Tool,
    ToolError,
    check_latitude,
    check_longitude,
    check_timestamp,
    given,
    param,
)

_FIELDS = ("content", "reminder_timestamp", "latitude", "longitude")
_BOUNDS = ("creation_timestamp_lowerbound", "creation_timestamp_upperbound", "reminder_timestamp_lowerbound",
           "reminder_timestamp_upperbound")


def _check_place(args: dict[str, Any]) -> None:
    check_latitude(args["latitude"], "latitude")
    check_longitude(args["longitude"], "longitude")


def _add_reminder(call: Call, args: dict[str, Any]) -> str:
    check_timestamp(args["reminder_timestamp"], "reminder_timestamp")
    _check_place(args)
    reminder_id = call.new_id()
    row = {"reminder_id": reminder_id, "content": args["content"], "creation_timestamp": call.clock.now,
           "reminder_timestamp": args["reminder_timestamp"], "latitude": args["latitude"],
           "longitude": args["longitude"]}
    call.world = call.world.with_table("reminder", (*call.world.reminder, row))
    return reminder_id


def _modify_reminder(call: Call, args: dict[str, Any]) -> None:
    check_timestamp(args["reminder_timestamp"], "reminder_timestamp")
    _check_place(args)
    if not any(given(args[name]) for name in _FIELDS):
        raise ToolError("ValueError", "No update information given. At least one new field should be provided "
                                      "among [content, reminder_timestamp, latitude, longitude] in order to modify "
                                      "reminder")
    reminder_id = args["reminder_id"]
    changes = {name: args[name] for name in _FIELDS if given(args[name])}
    updated = {**the_row(call.world.reminder, "reminder_id", reminder_id), "creation_timestamp": call.clock.now,
               **changes}
    rest = without(call.world.reminder, "reminder_id", reminder_id)
    call.world = call.world.with_table("reminder", (*rest, updated))


def _remove_reminder(call: Call, args: dict[str, Any]) -> None:
    call.world = call.world.with_table("reminder", without(call.world.reminder, "reminder_id", args["reminder_id"]))


def _search_reminder(call: Call, args: dict[str, Any]) -> list[dict[str, Any]]:
    for bound in _BOUNDS:
        check_timestamp(args[bound], bound)
    _check_place(args)
    return search(call.world.reminder, (
        Criterion("reminder_id", args["reminder_id"]),
        Criterion("content", args["content"], "fuzzy", 50),
        Criterion("creation_timestamp", args["creation_timestamp_lowerbound"], "at_least"),
        Criterion("creation_timestamp", args["creation_timestamp_upperbound"], "at_most"),
        Criterion("reminder_timestamp", args["reminder_timestamp_lowerbound"], "at_least"),
        Criterion("reminder_timestamp", args["reminder_timestamp_upperbound"], "at_most"),
        Criterion("latitude", args["latitude"]),
        Criterion("longitude", args["longitude"]),
    ))


def _bound(name: str, doc: str) -> Any:
    return param(name, "float", doc, NOT_GIVEN)


TOOLS = (
    Tool(name="add_reminder", changes=True, run=_add_reminder,
         doc="Add a reminder. Returns the new reminder's reminder_id.",
         params=(param("content", "str", "What to be reminded of"),
                 param("reminder_timestamp", "float", "When to be reminded, as a POSIX timestamp"),
                 param("latitude", "float", "Optional. Latitude of a place tied to the reminder", None, nullable=True),
                 param("longitude", "float", "Optional. Longitude of a place tied to the reminder", None,
                       nullable=True))),
    Tool(name="modify_reminder", changes=True, run=_modify_reminder,
         doc="Change a reminder's fields; give at least one new value. Its creation time becomes now.",
         params=(param("reminder_id", "str", "Unique identifier of the reminder"),
                 param("content", "str", "New content", NOT_GIVEN),
                 param("reminder_timestamp", "float", "New time to be reminded, as a POSIX timestamp", NOT_GIVEN),
                 param("latitude", "float", "New latitude", NOT_GIVEN, nullable=True),
                 param("longitude", "float", "New longitude", NOT_GIVEN, nullable=True))),
    Tool(name="remove_reminder", changes=True, run=_remove_reminder, doc="Remove a reminder.",
         params=(param("reminder_id", "str", "Unique identifier of the reminder to remove"),)),
    Tool(name="search_reminder", run=_search_reminder,
         doc="Search reminders by any of the given fields; a reminder must match all of them. Returns the matching "
             "reminders, an empty list if none match.",
         params=(param("reminder_id", "str", "Unique identifier of the reminder, matched exactly", NOT_GIVEN),
                 param("content", "str", "Content, matched fuzzily", NOT_GIVEN),
                 _bound("creation_timestamp_lowerbound", "Earliest POSIX time the reminder was created"),
                 _bound("creation_timestamp_upperbound", "Latest POSIX time the reminder was created"),
                 _bound("reminder_timestamp_lowerbound", "Earliest POSIX time the reminder is due"),
                 _bound("reminder_timestamp_upperbound", "Latest POSIX time the reminder is due"),
                 param("latitude", "float", "Latitude of the reminder's place, matched exactly", NOT_GIVEN),
                 param("longitude", "float", "Longitude of the reminder's place, matched exactly", NOT_GIVEN))),
)
