"""The tools' behaviour and their state dependencies, the schemas the agent sees, and bad calls answered with the
benchmark's errors instead of a crash."""

from __future__ import annotations

from tracec.trace_rl.envs.toolsandbox.catalog import Toolbox, all_tools
from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.holidays import us_holidays
from tracec.trace_rl.envs.toolsandbox.sandbox import Sandbox
from tracec.trace_rl.envs.toolsandbox.world import base_world, stable_id

CLOCK = Clock()


def sandbox(base="base", tools=None):
    names = list(all_tools()) if tools is None else tools
    return Sandbox(world=base_world(base, CLOCK), clock=CLOCK, toolbox=Toolbox(names), agent_prompt="p",
                   user_prompt="u", first_message="hi")


def answer(box, tool, **arguments):
    return box.call(tool, arguments).answer.content


def test_low_battery_mode_blocks_the_radios_and_turning_it_on_turns_them_off():
    box = sandbox("base_low_battery_mode_on_wifi_off_location_service_off_cellular_off")
    for tool, label in (("set_wifi_status", "Wifi"), ("set_cellular_service_status", "Cellular service"),
                        ("set_location_service_status", "Location service")):
        assert answer(box, tool, on=True) == f"PermissionError: {label} cannot be turned on in low battery mode"
    assert answer(box, "set_low_battery_mode_status", on=False) == "None"
    assert answer(box, "set_wifi_status", on=True) == "None"
    assert answer(box, "set_wifi_status", on=True) == "ValueError: wifi already enabled"
    assert answer(box, "set_low_battery_mode_status", on=True) == "None"
    settings = box.world.settings
    assert not settings["wifi"] and not settings["cellular"] and not settings["location_service"]


def test_messaging_needs_cellular_and_location_needs_location_service():
    box = sandbox("base_cellular_off_location_service_off")
    assert answer(box, "send_message_with_phone_number", phone_number="+12453344098", content="hey") == \
        "ConnectionError: Cellular service is not enabled"
    assert answer(box, "get_current_location") == "PermissionError: Location service is not enabled."
    box.call("set_cellular_service_status", {"on": True})
    message_id = box.call("send_message_with_phone_number", {"phone_number": "+12453344098", "content": "hey"})
    sent = box.world.messaging[-1]
    assert message_id.accepted and sent["recipient_person_id"] == stable_id("Fredrik Thordendal")
    assert sent["sender_phone_number"] == "+11233344455" and sent["creation_timestamp"] == CLOCK.now


def test_contacts_are_added_modified_searched_and_removed():
    box = sandbox()
    added = box.call("add_contact", {"name": "Stephen Sondheim", "phone_number": "+19876543210"})
    person_id = added.answer.tool_trace[0]["result"]
    assert added.answer.tool_trace[0]["arguments"] == {"name": "Stephen Sondheim", "phone_number": "+19876543210",
                                                       "relationship": None, "is_self": False}
    assert answer(box, "modify_contact", person_id=person_id, relationship="friend") == "None"
    assert box.world.contact[-1]["relationship"] == "friend"
    found = box.call("search_contacts", {"name": "Stephen"}).answer.tool_trace[0]["result"]
    assert [row["person_id"] for row in found] == [person_id]
    assert answer(box, "remove_contact", person_id=person_id) == "None"
    assert answer(box, "remove_contact", person_id=person_id).startswith("NoDataError: No db entry matching")
    assert answer(box, "add_contact", name="Me", phone_number="+1555", is_self=True) == \
        "DuplicateError: Self entry already exists. Cannot add another one."
    assert answer(box, "add_contact", name="X", phone_number="5551234") == \
        "NumberParseException: (0) Missing or invalid default region."
    assert answer(box, "modify_contact", person_id=person_id).startswith("ValueError: No update information given")


def test_a_search_needs_a_criterion_and_time_bounds_are_checked():
    box = sandbox()
    assert answer(box, "search_messages").startswith("ValueError: No search criteria are given.")
    assert answer(box, "search_reminder", reminder_timestamp_lowerbound=1e12) == \
        "ValueError: Parameter 'reminder_timestamp_lowerbound' is larger than its valid range maximum of 2524604400.0."
    upcoming = box.call("search_reminder", {"reminder_timestamp_lowerbound": CLOCK.now}).answer.tool_trace[0]
    assert [row["content"] for row in upcoming["result"]] == ["Buy a nice rich navy bathing dress"]


def test_reminders_are_added_and_modified_with_a_fresh_creation_time():
    box = sandbox()
    due = CLOCK.day_at("tomorrow", 17)
    reminder_id = box.call("add_reminder", {"content": "Buy milk", "reminder_timestamp": due}).answer.tool_trace[0][
        "result"]
    assert box.world.reminder[-1]["reminder_timestamp"] == due
    reminder_2 = stable_id("reminder_2")
    assert answer(box, "modify_reminder", reminder_id=reminder_2, reminder_timestamp=due) == "None"
    assert box.world.reminder[-1]["reminder_id"] == reminder_2  # removed and appended, as the benchmark does
    assert box.world.reminder[-1]["creation_timestamp"] == CLOCK.now
    assert answer(box, "remove_reminder", reminder_id=reminder_id) == "None"


def test_time_tools_holidays_and_units():
    box = sandbox()
    assert answer(box, "get_current_timestamp") == repr(CLOCK.now)
    info = box.call("timestamp_to_datetime_info", {"timestamp": CLOCK.now}).answer.tool_trace[0]["result"]
    assert info == {"year": 2024, "month": 6, "day": 5, "hour": 10, "minute": 0, "second": 0, "isoweekday": 3}
    christmas = box.call("search_holiday", {"holiday_name": "Christmas"}).answer.tool_trace[0]["result"]
    assert christmas == CLOCK.timestamp(2024, 12, 25)
    diff = box.call("timestamp_diff", {"timestamp_0": CLOCK.now, "timestamp_1": christmas}).answer.tool_trace[0]
    assert diff["result"] == {"days": 202, "seconds": 50400}
    assert answer(box, "search_holiday", holiday_name="Not a holiday at all") == "None"
    assert answer(box, "unit_conversion", amount=100, from_unit="Celsius", to_unit="Fahrenheit").startswith("211.99")
    assert answer(box, "unit_conversion", amount=1, from_unit="meter", to_unit="gram").startswith(
        "DimensionalityError")
    assert answer(box, "datetime_info_to_timestamp", year=2024, month=13, day=1, hour=0, minute=0, second=0) == \
        "ValueError: month must be in 1..12"
    assert {name: day.isoformat() for day, name in us_holidays(2024)}["Thanksgiving Day"] == "2024-11-28"
    wifi_off = sandbox("base_wifi_off")
    assert answer(wifi_off, "search_holiday", holiday_name="Christmas Day") == "ConnectionError: Wifi is not enabled"


def test_web_tools_check_their_arguments_then_fail_offline():
    box = sandbox()
    assert answer(box, "search_lat_lon", latitude=100.0, longitude=0.0) == \
        "ValueError: Parameter 'latitude' is larger than its valid range maximum of 90.0."
    assert answer(box, "search_stock", query="Apple") == \
        "ConnectionError: search_stock calls a web API, which is out of reach offline"
    assert answer(sandbox("base_wifi_off"), "search_stock", query="Apple") == "ConnectionError: Wifi is not enabled"


def test_bad_calls_are_answered_with_an_error_and_change_nothing():
    box = sandbox(tools=["set_wifi_status"])
    before = box.world
    assert answer(box, "set_wifi_status", on="no") == \
        "TypeError: Parameter 'on' is of type '<class 'str'>', but expected '<class 'bool'>'."
    assert answer(box, "set_wifi_status") == "TypeError: missing a required argument: 'on'"
    assert answer(box, "set_wifi_status", on=False, now=True) == "TypeError: got an unexpected keyword argument 'now'"
    assert answer(box, "remove_contact", person_id="x").startswith(
        "KeyError: Agent tool call 'remove_contact' is not a known allowed tool. Options are: set_wifi_status")
    assert answer(box, "no_such_tool").startswith("KeyError: Agent tool call 'no_such_tool'")
    assert box.call("set_wifi_status", ["on"]).answer.content.startswith("TypeError: set_wifi_status() arguments")
    assert box.malformed_call("<tool_call>{", "invalid JSON").answer.content == "SyntaxError: invalid JSON"
    refused = box.call("set_wifi_status", {"on": 1})
    assert not refused.accepted and refused.answer.tool_trace is None and refused.answer.exception
    assert box.world == before


def test_schemas_are_typed_with_the_required_arguments():
    tools = all_tools()
    schema = tools["add_reminder"].schema()["function"]
    assert schema["name"] == "add_reminder"
    assert schema["parameters"]["required"] == ["content", "reminder_timestamp"]
    assert {k: v["type"] for k, v in schema["parameters"]["properties"].items()} == {
        "content": "string", "reminder_timestamp": "number", "latitude": "number", "longitude": "number"}
    assert tools["search_contacts"].schema()["function"]["parameters"]["required"] == []
    assert tools["set_wifi_status"].schema()["function"]["parameters"]["properties"]["on"]["type"] == "boolean"
    box = Toolbox(["search_contacts", "remove_contact"], ["remove_contact"])
    assert [s["function"]["name"] for s in box.schemas()] == ["search_contacts"]
