"""ToolSandbox's world state: the four databases the tools read and change, and the base state of every scenario.

A database is a tuple of rows (column name to value, in the benchmark's column order); the settings database has
one row. A `World` is immutable: a tool that changes a database builds a new world, so every message of an
episode keeps the world as it was when the message was written (the benchmark's per-message snapshots).
A changed row is removed and appended again, as the benchmark's remove-then-add does, so row order (which its
guardrail comparison sees) follows it too.

`base_world(name, clock)` is the benchmark's base scenario: its contacts, messages (two of them share an id, as
in the benchmark) and reminders, with times relative to the clock's now, and its named variants
(`base_wifi_off`, ..., `base_low_battery_mode_on_wifi_off_location_service_off_cellular_off`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tracec.trace_rl.envs.toolsandbox.clock import Clock

Row = Mapping[str, Any]
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "setting": ("device_id", "cellular", "wifi", "location_service", "low_battery_mode", "latitude", "longitude"),
    "contact": ("person_id", "name", "phone_number", "relationship", "is_self"),
    "messaging": ("message_id", "sender_person_id", "sender_phone_number", "recipient_person_id",
                  "recipient_phone_number", "content", "creation_timestamp"),
    "reminder": ("reminder_id", "content", "creation_timestamp", "reminder_timestamp", "latitude", "longitude"),
}
DATABASES = tuple(COLUMNS)
SWITCHES = ("low_battery_mode", "wifi", "location_service", "cellular")  # what a base variant's name can flip


def stable_id(payload: str) -> str:
    """The benchmark's deterministic ids: uuid5 of the payload in the URL namespace."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, payload))


@dataclass(frozen=True, kw_only=True)
class World:
    setting: tuple[Row, ...]
    contact: tuple[Row, ...]
    messaging: tuple[Row, ...]
    reminder: tuple[Row, ...]

    def table(self, database: str) -> tuple[Row, ...]:
        if database not in COLUMNS:
            raise KeyError(f"unknown database {database!r}; the databases are {', '.join(DATABASES)}")
        rows: tuple[Row, ...] = getattr(self, database)
        return rows

    def with_table(self, database: str, rows: tuple[Row, ...]) -> World:
        self.table(database)
        return replace(self, **{database: rows})

    @property
    def settings(self) -> Row:
        return self.setting[0]

    def with_settings(self, **changes: Any) -> World:
        return replace(self, setting=({**self.settings, **changes},))


def base_world(name: str, clock: Clock) -> World:
    """The base state `name` names: `base`, or `base` then `_<switch>_<on|off>` for each switch it flips."""
    settings = {"device_id": stable_id("my_phone"), "cellular": True, "wifi": True, "location_service": True,
                "low_battery_mode": False, "latitude": 37.334606, "longitude": -122.009102}
    settings.update(_flips(name))
    return World(setting=(settings,), contact=_contacts(), messaging=_messages(clock), reminder=_reminders(clock))


def _flips(name: str) -> dict[str, bool]:
    if name != "base" and not name.startswith("base_"):
        raise ValueError(f"unknown base state {name!r}: expected base or base_<switch>_<on|off>...")
    flips: dict[str, bool] = {}
    rest = name[len("base"):]
    while rest:
        switch = next((s for s in SWITCHES if rest.startswith((f"_{s}_on", f"_{s}_off"))), None)
        if switch is None:
            raise ValueError(f"unknown base state {name!r}: cannot read {rest!r}; switches: {', '.join(SWITCHES)}")
        rest = rest[len(switch) + 2:]
        state, rest = ("on", rest[2:]) if rest.startswith("on") else ("off", rest[3:])
        flips[switch] = state == "on"
    return flips


def _contacts() -> tuple[Row, ...]:
    people = (("Tomas Haake", "+11233344455", "self", True), ("Fredrik Thordendal", "+12453344098", "friend", False),
              ("John Petrucci", "+1234560987", "friend", False), ("Homer S", "+10000000000", "boss", False))
    return tuple({"person_id": stable_id(name), "name": name, "phone_number": phone, "relationship": relationship,
                  "is_self": is_self} for name, phone, relationship, is_self in people)


def _messages(clock: Clock) -> tuple[Row, ...]:
    me, boss, stranger = stable_id("Tomas Haake"), stable_id("Homer S"), "+18307976530"
    return (
        _message("message_0", None, stranger, me, "+11233344455", "Hey kid, you want some GPU?",
                 clock.ago(days=3, hours=4, minutes=5, seconds=6)),
        _message("message_1", me, "+11233344455", None, stranger, "No leave me alone",
                 clock.ago(days=3, hours=3, minutes=5, seconds=6)),
        _message("message_4", boss, "+10000000000", me, "+11233344455", "How's it going",
                 clock.ago(hours=1, minutes=3, seconds=3)),
        _message("message_2", me, "+11233344455", boss, "+10000000000", "Things are proceeding as expected",
                 clock.ago(hours=1, minutes=2, seconds=3)),
        _message("message_4", boss, "+10000000000", me, "+11233344455", "Good, keep me posted",
                 clock.ago(minutes=1, seconds=2)),
    )


def _message(key: str, sender: str | None, sender_phone: str, recipient: str | None, recipient_phone: str,
             content: str, created: float) -> Row:
    return {"message_id": stable_id(key), "sender_person_id": sender, "sender_phone_number": sender_phone,
            "recipient_person_id": recipient, "recipient_phone_number": recipient_phone, "content": content,
            "creation_timestamp": created}


def _reminders(clock: Clock) -> tuple[Row, ...]:
    def reminder(key: str, content: str, created: float, due: float, lat: float | None, lon: float | None) -> Row:
        return {"reminder_id": stable_id(key), "content": content, "creation_timestamp": created,
                "reminder_timestamp": due, "latitude": lat, "longitude": lon}

    later = clock.ago(hours=-1)
    return (
        reminder("reminder_0", "Look for Company SF tickets", clock.ago(days=3), clock.ago(days=1), None, None),
        reminder("reminder_1", "Buy tickets for Merrily next week", clock.ago(days=1), clock.ago(minutes=1),
                 None, None),
        reminder("reminder_2", "Buy a nice rich navy bathing dress", clock.ago(hours=1), later,
                 37.3237926356735, -122.03961770355414),
    )
