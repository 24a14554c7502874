"""The contact book tools: add, modify, remove and search contacts.

One contact is the user (`is_self`); a second self entry is refused (DuplicateError). Names and relationships
are searched fuzzily (WRatio >= 90), ids, phone numbers and `is_self` exactly. Phone numbers must be in the
international form the benchmark's `phonenumbers` check accepts.
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.envs.toolsandbox.search import Criterion, search, the_row, without
from tracec.trace_rl.envs.toolsandbox.toolkit import NOT_GIVEN, Call, Tool, ToolError, check_phone_number, given, param

_FIELDS = ("name", "phone_number", "relationship", "is_self")


def find_contacts(call: Call, **criteria: Any) -> list[dict[str, Any]]:
    """The contacts matching the given criteria (unspecified ones are not given)."""
    return search(call.world.contact, (
        Criterion("person_id", criteria.get("person_id", NOT_GIVEN)),
        Criterion("name", criteria.get("name", NOT_GIVEN), "fuzzy", 90),
        Criterion("phone_number", criteria.get("phone_number", NOT_GIVEN)),
        Criterion("relationship", criteria.get("relationship", NOT_GIVEN), "fuzzy", 90),
        Criterion("is_self", criteria.get("is_self", NOT_GIVEN)),
    ))


def _add_contact(call: Call, args: dict[str, Any]) -> str:
    check_phone_number(args["phone_number"])
    person_id = call.new_id()
    if args["is_self"] and find_contacts(call, is_self=True):
        raise ToolError("DuplicateError", "Self entry already exists. Cannot add another one.")
    row = {"person_id": person_id, "name": args["name"], "phone_number": args["phone_number"],
           "relationship": args["relationship"], "is_self": args["is_self"]}
    call.world = call.world.with_table("contact", (*call.world.contact, row))
    return person_id


def _modify_contact(call: Call, args: dict[str, Any]) -> None:
    if not any(given(args[name]) for name in _FIELDS):
        raise ToolError("ValueError", "No update information given. At least one new field should be provided "
                                      "among [name, phone_number, relationship, is_self] in order to modify contact")
    check_phone_number(args["phone_number"])
    person_id = args["person_id"]
    selves = find_contacts(call, is_self=True)
    if selves and args["is_self"] is True and selves[0]["person_id"] != person_id:
        raise ToolError("DuplicateError", "Self entry already exists. Cannot add another one.")
    updated = {**the_row(call.world.contact, "person_id", person_id),
               **{name: args[name] for name in _FIELDS if given(args[name])}}
    call.world = call.world.with_table("contact", (*without(call.world.contact, "person_id", person_id), updated))


def _remove_contact(call: Call, args: dict[str, Any]) -> None:
    call.world = call.world.with_table("contact", without(call.world.contact, "person_id", args["person_id"]))


def _search_contacts(call: Call, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_phone_number(args["phone_number"])
    return find_contacts(call, **args)


TOOLS = (
    Tool(name="add_contact", changes=True, run=_add_contact,
         doc="Add a person to the contact book; identical entries are allowed and get different person_ids. "
             "Returns the new contact's person_id.",
         params=(param("name", "str", "Name of the person"),
                 param("phone_number", "str", "Phone number of the person"),
                 param("relationship", "str", "Optional. How the user knows this person", None, nullable=True),
                 param("is_self", "bool", "Optional, False by default. True if the contact is the user", False))),
    Tool(name="modify_contact", changes=True, run=_modify_contact,
         doc="Change a contact's fields; give at least one new value.",
         params=(param("person_id", "str", "Unique identifier of the contact"),
                 param("name", "str", "New name", NOT_GIVEN),
                 param("phone_number", "str", "New phone number", NOT_GIVEN),
                 param("relationship", "str", "New relationship", NOT_GIVEN),
                 param("is_self", "bool", "True if the contact is the user", NOT_GIVEN))),
    Tool(name="remove_contact", changes=True, run=_remove_contact, doc="Remove a contact from the contact book.",
         params=(param("person_id", "str", "Unique identifier of the contact to remove"),)),
    Tool(name="search_contacts", run=_search_contacts,
         doc="Search contacts by any of the given fields; a contact must match all of them. Returns the matching "
             "contacts, an empty list if none match.",
         params=(param("person_id", "str", "Unique identifier of the contact, matched exactly", NOT_GIVEN),
                 param("name", "str", "Name of the person, matched fuzzily", NOT_GIVEN),
                 param("phone_number", "str", "Phone number, matched exactly", NOT_GIVEN),
                 param("relationship", "str", "Relationship to the user, matched fuzzily", NOT_GIVEN),
                 param("is_self", "bool", "Whether the contact is the user, matched exactly", NOT_GIVEN))),
)
