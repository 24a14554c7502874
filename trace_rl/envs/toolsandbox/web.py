"""The benchmark's web search tools (RapidAPI services), declared as the agent sees them and unreachable offline.

Their arguments are checked as the benchmark checks them (types, latitude and longitude ranges, both or neither
coordinate, location service for the current position, Wi-Fi), and then the call fails with a ConnectionError:
the web API behind them is out of reach here. Only scenarios whose score does not depend on these answers are
transcribed (`docs/toolsandbox.md`): there, calling one of them is what the scenario forbids or never needs.
Left out: the answers themselves (addresses, places, weather, stocks, exchange rates).
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.envs.toolsandbox.device import current_location, is_on
from tracec.trace_rl.envs.toolsandbox.toolkit import Call, Tool, ToolError, check_latitude, check_longitude, param


def _offline(name: str, *, place: str | None = None) -> Any:
    def run(call: Call, args: dict[str, Any]) -> None:
        if place is not None:
            check_latitude(args["latitude"], "latitude")
            check_longitude(args["longitude"], "longitude")
            if place == "optional":
                if (args["latitude"] is None) != (args["longitude"] is None):
                    raise ToolError("ValueError",
                                    "Latitude and Longitude must be either both provided, or both not provided")
                if args["latitude"] is None:
                    current_location(call, {})
        if not is_on(call, "wifi"):
            raise ToolError("ConnectionError", "Wifi is not enabled")
        raise ToolError("ConnectionError", f"{name} calls a web API, which is out of reach offline")

    return run


def _around(what: str) -> tuple[Any, ...]:
    return (param("latitude", "float", f"Latitude to search {what}; the current one if not given", None,
                  nullable=True),
            param("longitude", "float", f"Longitude to search {what}; the current one if not given", None,
                  nullable=True))


TOOLS = (
    Tool(name="search_lat_lon", run=_offline("search_lat_lon", place="required"),
         doc="Find the address of a latitude and longitude. Returns the address, or None if none is found.",
         params=(param("latitude", "float", "Latitude to look up"),
                 param("longitude", "float", "Longitude to look up"))),
    Tool(name="search_location_around_lat_lon", run=_offline("search_location_around_lat_lon", place="optional"),
         doc="Search for a place (a business, a point of interest, a city, an address) around a latitude and "
             "longitude, the current location by default. Returns a list of places with details such as name, "
             "address, phone number and coordinates.",
         params=(param("location", "str", "What to search for"), *_around("around"))),
    Tool(name="search_weather_around_lat_lon", run=_offline("search_weather_around_lat_lon", place="optional"),
         doc="Weather now or some days ahead around a latitude and longitude, the current location by default. "
             "Temperatures are in Celsius.",
         params=(param("days", "int", "Days from today; 0 for today", 0), *_around("the weather at"))),
    Tool(name="search_stock", run=_offline("search_stock"),
         doc="Look up a stock by company name, symbol or exchange: name, symbol, price, change, currency.",
         params=(param("query", "str", "A company name, stock symbol or exchange name"),)),
    Tool(name="convert_currency", run=_offline("convert_currency"),
         doc="Convert an amount between currencies given by ISO 4217 codes.",
         params=(param("amount", "float", "Amount to convert"),
                 param("from_currency_code", "str", "ISO 4217 code of the amount's currency"),
                 param("to_currency_code", "str", "ISO 4217 code to convert to"))),
)
