"""The settings tools: cellular, Wi-Fi, location service, low battery mode, and the current location.

Their implicit dependencies are the benchmark's: turning low battery mode on turns cellular, Wi-Fi and location
off; none of the three can be turned on while it is on (PermissionError); the location is readable only with
location service on. Setting a switch to the state it is in is a ValueError (`wifi already enabled`).
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.envs.toolsandbox.toolkit import Call, Tool, ToolError, param

_DEPENDENT = ("cellular", "wifi", "location_service")  # what low battery mode turns off


def switch(call: Call, setting: str, on: bool) -> None:
    if call.world.settings[setting] == on:
        raise ToolError("ValueError", f"{setting} already {'enabled' if on else 'disabled'}")
    call.world = call.world.with_settings(**{setting: on})


def is_on(call: Call, setting: str) -> bool:
    return bool(call.world.settings[setting])


def _setter(setting: str, label: str) -> Any:
    def run(call: Call, args: dict[str, Any]) -> None:
        if args["on"] and is_on(call, "low_battery_mode"):
            raise ToolError("PermissionError", f"{label} cannot be turned on in low battery mode")
        switch(call, setting, args["on"])

    return run


def _getter(setting: str) -> Any:
    def run(call: Call, args: dict[str, Any]) -> bool:
        return is_on(call, setting)

    return run


def _set_low_battery_mode(call: Call, args: dict[str, Any]) -> None:
    switch(call, "low_battery_mode", args["on"])
    if args["on"]:
        call.world = call.world.with_settings(**{setting: False for setting in _DEPENDENT})


def current_location(call: Call, args: dict[str, Any]) -> dict[str, float]:
    if not is_on(call, "location_service"):
        raise ToolError("PermissionError", "Location service is not enabled.")
    settings = call.world.settings
    return {"latitude": settings["latitude"], "longitude": settings["longitude"]}


def _on(what: str) -> tuple[Any, ...]:
    return (param("on", "bool", f"True to turn {what} on, False to turn it off"),)


TOOLS = (
    Tool(name="set_low_battery_mode_status", doc="Turn low battery mode on or off.", params=_on("low battery mode"),
         run=_set_low_battery_mode, changes=True),
    Tool(name="get_low_battery_mode_status", doc="Whether low battery mode is on.", params=(),
         run=_getter("low_battery_mode")),
    Tool(name="set_location_service_status", doc="Turn location service on or off.", params=_on("location service"),
         run=_setter("location_service", "Location service"), changes=True),
    Tool(name="get_location_service_status", doc="Whether location service is on.", params=(),
         run=_getter("location_service")),
    Tool(name="set_cellular_service_status", doc="Turn cellular service on or off.", params=_on("cellular service"),
         run=_setter("cellular", "Cellular service"), changes=True),
    Tool(name="get_cellular_service_status", doc="Whether cellular service is on.", params=(),
         run=_getter("cellular")),
    Tool(name="set_wifi_status", doc="Turn Wi-Fi on or off.", params=_on("wifi"), run=_setter("wifi", "Wifi"),
         changes=True),
    Tool(name="get_wifi_status", doc="Whether Wi-Fi is on.", params=(), run=_getter("wifi")),
    Tool(name="get_current_location", doc="The current latitude and longitude (needs location service on).",
         params=(), run=current_location),
)
