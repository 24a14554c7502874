"""The utility tools: the current time, date arithmetic, unit conversion and the distance between two points.

Dates are read in the clock's zone. Distances are geodesic on the WGS-84 ellipsoid (Vincenty's inverse formula,
within a millimetre of the benchmark's geopy). Unit conversion covers the common units of temperature, length,
mass, volume, speed and time by their pint names and usual abbreviations, retried in lowercase as the benchmark
retries; an unknown unit is an UndefinedUnitError, a unit of another dimension a DimensionalityError.
Left out: the rest of pint's unit registry.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from tracec.trace_rl.envs.toolsandbox.toolkit import (
    Call,
    Tool,
    ToolError,
    check_latitude,
    check_longitude,
    check_timestamp,
    param,
)

# (names, dimension, scale, offset): the value in the dimension's base unit is (value + offset) * scale
_UNIT_TABLE: tuple[tuple[tuple[str, ...], str, float, float], ...] = (
    (("kelvin", "K", "degK"), "temperature", 1.0, 0.0),
    (("celsius", "degC", "degree_Celsius", "°C"), "temperature", 1.0, 273.15),
    (("fahrenheit", "degF", "degree_Fahrenheit", "°F"), "temperature", 5 / 9, 459.67),
    (("meter", "metre", "m", "meters"), "length", 1.0, 0.0),
    (("kilometer", "kilometre", "km", "kilometers"), "length", 1000.0, 0.0),
    (("centimeter", "centimetre", "cm"), "length", 0.01, 0.0),
    (("millimeter", "millimetre", "mm"), "length", 0.001, 0.0),
    (("mile", "mi", "miles"), "length", 1609.344, 0.0),
    (("yard", "yd", "yards"), "length", 0.9144, 0.0),
    (("foot", "feet", "ft"), "length", 0.3048, 0.0),
    (("inch", "in", "inches"), "length", 0.0254, 0.0),
    (("gram", "g", "grams"), "mass", 0.001, 0.0),
    (("kilogram", "kg", "kilograms"), "mass", 1.0, 0.0),
    (("milligram", "mg"), "mass", 1e-6, 0.0),
    (("pound", "lb", "lbs", "pounds"), "mass", 0.45359237, 0.0),
    (("ounce", "oz", "ounces"), "mass", 0.028349523125, 0.0),
    (("liter", "litre", "l", "L", "liters"), "volume", 0.001, 0.0),
    (("milliliter", "millilitre", "ml", "mL"), "volume", 1e-6, 0.0),
    (("gallon", "gal", "gallons"), "volume", 0.003785411784, 0.0),
    (("quart", "qt"), "volume", 0.000946352946, 0.0),
    (("cup", "cups"), "volume", 0.0002365882365, 0.0),
    (("fluid_ounce", "floz"), "volume", 2.95735295625e-5, 0.0),
    (("meter_per_second", "m/s"), "speed", 1.0, 0.0),
    (("kilometer_per_hour", "km/h", "kph", "kmh"), "speed", 1000 / 3600, 0.0),
    (("mile_per_hour", "mph"), "speed", 1609.344 / 3600, 0.0),
    (("knot", "kt", "knots"), "speed", 1852 / 3600, 0.0),
    (("second", "s", "sec", "seconds"), "time", 1.0, 0.0),
    (("minute", "min", "minutes"), "time", 60.0, 0.0),
    (("hour", "h", "hr", "hours"), "time", 3600.0, 0.0),
    (("day", "d", "days"), "time", 86400.0, 0.0),
    (("week", "weeks"), "time", 604800.0, 0.0),
)
_UNITS = {name: (dimension, scale, offset) for names, dimension, scale, offset in _UNIT_TABLE for name in names}


def convert_units(amount: float, from_unit: str, to_unit: str) -> float:
    try:
        return _convert(amount, from_unit, to_unit)
    except ToolError as err:
        if err.kind != "UndefinedUnitError":
            raise
        return _convert(amount, from_unit.lower(), to_unit.lower())


def _convert(amount: float, from_unit: str, to_unit: str) -> float:
    for unit in (from_unit, to_unit):
        if unit not in _UNITS:
            raise ToolError("UndefinedUnitError", f"'{unit}' is not defined in the unit registry")
    (have, scale, offset), (want, to_scale, to_offset) = _UNITS[from_unit], _UNITS[to_unit]
    if have != want:
        raise ToolError("DimensionalityError", f"Cannot convert from '{from_unit}' ([{have}]) to '{to_unit}' "
                                               f"([{want}])")
    return (amount + offset) * scale / to_scale - to_offset


def geodesic_km(lat0: float, lon0: float, lat1: float, lon1: float) -> float:
    """Vincenty's inverse formula on WGS-84, in kilometres."""
    a, f = 6378137.0, 1 / 298.257223563
    b = (1 - f) * a
    u1, u2 = math.atan((1 - f) * math.tan(math.radians(lat0))), math.atan((1 - f) * math.tan(math.radians(lat1)))
    big_l = math.radians(lon1 - lon0)
    lam = big_l
    sin_sigma = cos_sigma = sigma = cos2_alpha = cos_2sm = 0.0
    for _ in range(200):
        sin_lam, cos_lam = math.sin(lam), math.cos(lam)
        sin_sigma = math.hypot(math.cos(u2) * sin_lam,
                               math.cos(u1) * math.sin(u2) - math.sin(u1) * math.cos(u2) * cos_lam)
        if sin_sigma == 0:
            return 0.0
        cos_sigma = math.sin(u1) * math.sin(u2) + math.cos(u1) * math.cos(u2) * cos_lam
        sigma = math.atan2(sin_sigma, cos_sigma)
        sin_alpha = math.cos(u1) * math.cos(u2) * sin_lam / sin_sigma
        cos2_alpha = 1 - sin_alpha ** 2
        cos_2sm = cos_sigma - 2 * math.sin(u1) * math.sin(u2) / cos2_alpha if cos2_alpha else 0.0
        c = f / 16 * cos2_alpha * (4 + f * (4 - 3 * cos2_alpha))
        previous, lam = lam, big_l + (1 - c) * f * sin_alpha * (
            sigma + c * sin_sigma * (cos_2sm + c * cos_sigma * (-1 + 2 * cos_2sm ** 2)))
        if abs(lam - previous) < 1e-12:
            break
    u_sq = cos2_alpha * (a ** 2 - b ** 2) / b ** 2
    big_a = 1 + u_sq / 16384 * (4096 + u_sq * (-768 + u_sq * (320 - 175 * u_sq)))
    big_b = u_sq / 1024 * (256 + u_sq * (-128 + u_sq * (74 - 47 * u_sq)))
    delta = big_b * sin_sigma * (cos_2sm + big_b / 4 * (cos_sigma * (-1 + 2 * cos_2sm ** 2) - big_b / 6 * cos_2sm
                                                        * (-3 + 4 * sin_sigma ** 2) * (-3 + 4 * cos_2sm ** 2)))
    return b * big_a * (sigma - delta) / 1000


def _datetime_info(call: Call, args: dict[str, Any]) -> dict[str, int]:
    check_timestamp(args["timestamp"], "timestamp")
    moment = call.clock.datetime(args["timestamp"])
    return {"year": moment.year, "month": moment.month, "day": moment.day, "hour": moment.hour,
            "minute": moment.minute, "second": moment.second, "isoweekday": moment.isoweekday()}


def _to_timestamp(call: Call, args: dict[str, Any]) -> float:
    try:
        return call.clock.timestamp(args["year"], args["month"], args["day"], args["hour"], args["minute"],
                                    args["second"])
    except (ValueError, OverflowError) as err:
        raise ToolError("ValueError", str(err)) from None


def _shift(call: Call, args: dict[str, Any]) -> float:
    check_timestamp(args["timestamp"], "timestamp")
    delta = timedelta(weeks=args["weeks"], days=args["days"], hours=args["hours"], minutes=args["minutes"],
                      seconds=args["seconds"])
    try:
        return (call.clock.datetime(args["timestamp"]) + delta).timestamp()
    except OverflowError as err:
        raise ToolError("OverflowError", str(err)) from None


def _diff(call: Call, args: dict[str, Any]) -> dict[str, int]:
    check_timestamp(args["timestamp_0"], "timestamp_0")
    check_timestamp(args["timestamp_1"], "timestamp_1")
    delta = call.clock.datetime(args["timestamp_1"]) - call.clock.datetime(args["timestamp_0"])
    return {"days": delta.days, "seconds": delta.seconds}


def _clock_time(call: Call, args: dict[str, Any]) -> dict[str, int]:
    moment = call.clock.datetime(args["seconds"])
    return {"hour": moment.hour, "minute": moment.minute, "second": moment.second}


def _distance(call: Call, args: dict[str, Any]) -> float:
    for key in ("latitude_0", "latitude_1"):
        check_latitude(args[key], key)
    for key in ("longitude_0", "longitude_1"):
        check_longitude(args[key], key)
    return geodesic_km(args["latitude_0"], args["longitude_0"], args["latitude_1"], args["longitude_1"])


def _shift_param(name: str) -> Any:
    return param(name, "int", f"Number of {name} to add (negative to subtract)", 0)


TOOLS = (
    Tool(name="get_current_timestamp", doc="The current POSIX timestamp.", params=(),
         run=lambda call, args: call.clock.now),
    Tool(name="timestamp_to_datetime_info", run=_datetime_info,
         doc="Split a POSIX timestamp into year, month, day, hour, minute, second and isoweekday (1 is Monday).",
         params=(param("timestamp", "float", "POSIX timestamp"),)),
    Tool(name="datetime_info_to_timestamp", run=_to_timestamp, doc="The POSIX timestamp of a date and time.",
         params=tuple(param(name, "int", doc) for name, doc in (
             ("year", "Year"), ("month", "Month"), ("day", "Day of the month"), ("hour", "Hour, 24-hour clock"),
             ("minute", "Minute"), ("second", "Second")))),
    Tool(name="shift_timestamp", run=_shift, doc="Shift a POSIX timestamp by the given amounts (each may be negative).",
         params=(param("timestamp", "float", "POSIX timestamp to shift"),
                 *(_shift_param(name) for name in ("weeks", "days", "hours", "minutes", "seconds")))),
    Tool(name="timestamp_diff", run=_diff,
         doc="timestamp_1 - timestamp_0, as whole days and the remaining seconds.",
         params=(param("timestamp_0", "float", "Timestamp to subtract"),
                 param("timestamp_1", "float", "Timestamp to subtract from"))),
    Tool(name="seconds_to_hours_minutes_seconds", run=_clock_time,
         doc="Split a number of seconds past 0:00 into hours, minutes and seconds.",
         params=(param("seconds", "float", "Seconds past 0:00"),)),
    Tool(name="unit_conversion", run=lambda call, args: convert_units(args["amount"], args["from_unit"],
                                                                      args["to_unit"]),
         doc="Convert an amount from one unit to another; units may be given by their common English names.",
         params=(param("amount", "float", "Amount in from_unit"), param("from_unit", "str", "Unit to convert from"),
                 param("to_unit", "str", "Unit to convert to"))),
    Tool(name="calculate_lat_lon_distance", run=_distance,
         doc="The distance in kilometres between two points given by latitude and longitude.",
         params=(param("latitude_0", "float", "Latitude of the first point"),
                 param("longitude_0", "float", "Longitude of the first point"),
                 param("latitude_1", "float", "Latitude of the second point"),
                 param("longitude_1", "float", "Longitude of the second point"))),
)
