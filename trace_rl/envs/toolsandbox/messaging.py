"""The messaging tools: send a text to a phone number, search the messages.

Sending needs cellular service (ConnectionError otherwise) and exactly one self contact, whose number is the
sender's; the recipient's person_id is filled in when the number is in the contact book. Content is searched
fuzzily (WRatio >= 50), ids and numbers exactly, creation times by bounds.
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.envs.toolsandbox.contacts import find_contacts
from tracec.trace_rl.envs.toolsandbox.device import is_on
from tracec.trace_rl.envs.toolsandbox.search import Criterion, search
from tracec.trace_rl.envs.toolsandbox.toolkit import (
    NOT_GIVEN,
    Call,
    Tool,
    ToolError,
    check_phone_number,
    check_timestamp,
    param,
)


def _send_message(call: Call, args: dict[str, Any]) -> str:
    check_phone_number(args["phone_number"])
    if not is_on(call, "cellular"):
        raise ToolError("ConnectionError", "Cellular service is not enabled")
    message_id = call.new_id()
    selves = find_contacts(call, is_self=True)
    if len(selves) != 1:
        raise ToolError("DuplicateError", "1 and only 1 self entry should exist in contacts database, instead found "
                                          f"{len(selves)}")
    recipients = find_contacts(call, phone_number=args["phone_number"])
    row = {"message_id": message_id, "sender_person_id": selves[0]["person_id"],
           "sender_phone_number": selves[0]["phone_number"],
           "recipient_person_id": recipients[0]["person_id"] if recipients else None,
           "recipient_phone_number": args["phone_number"], "content": args["content"],
           "creation_timestamp": call.clock.now}
    call.world = call.world.with_table("messaging", (*call.world.messaging, row))
    return message_id


def _search_messages(call: Call, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_phone_number(args["sender_phone_number"])
    check_phone_number(args["recipient_phone_number"])
    for bound in ("creation_timestamp_lowerbound", "creation_timestamp_upperbound"):
        check_timestamp(args[bound], bound)
    return search(call.world.messaging, (
        Criterion("message_id", args["message_id"]),
        Criterion("sender_person_id", args["sender_person_id"]),
        Criterion("sender_phone_number", args["sender_phone_number"]),
        Criterion("recipient_person_id", args["recipient_person_id"]),
        Criterion("recipient_phone_number", args["recipient_phone_number"]),
        Criterion("content", args["content"], "fuzzy", 50),
        Criterion("creation_timestamp", args["creation_timestamp_lowerbound"], "at_least"),
        Criterion("creation_timestamp", args["creation_timestamp_upperbound"], "at_most"),
    ))


TOOLS = (
    Tool(name="send_message_with_phone_number", changes=True, run=_send_message,
         doc="Send a text message to a phone number. Returns the new message's message_id.",
         params=(param("phone_number", "str", "Phone number to send the message to"),
                 param("content", "str", "Text of the message"))),
    Tool(name="search_messages", run=_search_messages,
         doc="Search messages by any of the given fields; a message must match all of them. Returns the matching "
             "messages, an empty list if none match.",
         params=(param("message_id", "str", "Unique identifier of the message, matched exactly", NOT_GIVEN),
                 param("sender_person_id", "str", "person_id of the sender, matched exactly", NOT_GIVEN),
                 param("sender_phone_number", "str", "Phone number of the sender, matched exactly", NOT_GIVEN),
                 param("recipient_person_id", "str", "person_id of the recipient, matched exactly", NOT_GIVEN),
                 param("recipient_phone_number", "str", "Phone number of the recipient, matched exactly", NOT_GIVEN),
                 param("content", "str", "Message text, matched fuzzily", NOT_GIVEN),
                 param("creation_timestamp_lowerbound", "float", "Earliest POSIX time the message was sent",
                       NOT_GIVEN),
                 param("creation_timestamp_upperbound", "float", "Latest POSIX time the message was sent",
                       NOT_GIVEN))),
)
