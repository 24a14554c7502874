"""argparse types for the counts, seeds, rates and devices that flags take, checked while the arguments parse.

A value out of range is then a usage error (exit 2) that names the flag, `argument --runs: must be at least 1, got
0`, said before a library is imported, a model loaded or an LLM called. The library's settings check the same values
again for their other callers (configs, tests), in their own words. It lives in the bottom package because the
library checks a device with the same pattern (`DEVICE`) as the command line's flags.
Left out: whether a device exists (that needs torch, `trace_rl.policy.catalog.require_device`).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

DEVICE = re.compile(r"cpu|cuda(:\d+)?")  # the devices a model is placed on


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer flag of at least `low` (and at most `high`)."""

    def check(text: str) -> int:
        value = int(text)  # a ValueError: argparse says "invalid int value"
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    check.__name__ = "int"
    return check


def number(low: float, high: float | None = None, *, above: bool = False) -> Callable[[str], float]:
    """A finite float flag of at least `low` (more than `low` if `above`), and at most `high`."""

    def check(text: str) -> float:
        value = float(text)  # a ValueError: argparse says "invalid float value"
        if not math.isfinite(value) or (value <= low if above else value < low) or (high is not None and value > high):
            bound = (f"between {low:g} and {high:g}" if high is not None
                     else f"more than {low:g}" if above else f"at least {low:g}")
            raise argparse.ArgumentTypeError(f"must be a number {bound}, got {text}")
        return value

    check.__name__ = "float"
    return check


def torch_device(text: str) -> str:
    """A torch device's name: cpu, cuda or cuda:N."""
    if DEVICE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda or cuda:N")
    return text
