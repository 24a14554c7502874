"""Trajectory files: JSONL, one episode a line (docs/trajectories.md), read into `Episode`s.

Reading checks the shape of every episode (an object with an `episode` id, lists of state and action objects,
`states` one longer than `actions`, a numeric `env_reward`, a boolean `success`) and stops at the first problem
with its file and line: nothing partial comes back. Hostile lines are located errors too: numbers beyond what
Python parses (over 4,300 digits) or than a float holds, arrays nested thousands deep. Episode ids are unique within
a file (a repeated one is most likely a file appended twice, which would count its episodes twice in every group).
The fields inside states and actions are left as parsed JSON; `fact_batch` checks them against a schema,
reporting through `Where` so that every trajectory error reads `file:line:1: error: episode ID: ...`.

Speed: the cyclic garbage collector is paused while a file is parsed (`gc_paused`): the parsed objects hold no
cycles, and otherwise full collections over the growing pile of them cost three times the parsing itself.

Defaults: a missing `task` makes the episode its own task, a missing `instruction` is the empty string, a missing
`env_reward` is 0.0, a missing `success` is None. Left out: compressed files, episodes that span lines.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tracec.dsl.errors import NOWHERE, DataError, Diagnostic, Loc

_SHOWN = 60  # characters of an offending value quoted in an error


@dataclass(frozen=True)
class Where:
    """Where an episode was read from: a file and 1-based line (JSONL), or a 1-based `row` of a table (Parquet,
    Arrow) with line 0; line 0 and no row for an episode built in memory."""

    path: str
    line: int
    row: int = 0

    def diagnostic(self, message: str, column: int = 1) -> Diagnostic:
        loc = Loc(self.line, column, self.line, column + 1) if self.line > 0 else NOWHERE
        if self.row > 0:
            message = f"row {self.row}: {message}"
        # A lone surrogate quoted from the data could not even be printed: show it escaped.
        return Diagnostic(self.path, loc, message.encode("utf-8", "backslashreplace").decode("utf-8"))

    def describe(self) -> str:
        return f"row {self.row}" if self.row > 0 else f"line {self.line}"


IN_MEMORY = Where("<memory>", 0)


@dataclass(frozen=True)
class Episode:
    """One rollout: `states[t]`, `actions[t]`, `states[t + 1]` is transition t (so one more state than actions)."""

    episode: str
    task: str
    instruction: str
    states: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    env_reward: float
    success: bool | None
    where: Where = field(default=IN_MEMORY, compare=False)


def shown(value: Any) -> str:
    """An offending value as JSON, cut short: `5`, `"tke"`, `[1, 2]`."""
    if type(value) is int and value.bit_length() > 200:  # json.dumps refuses ints of over 4,300 digits
        return f"an integer of {len(str(value)) if value.bit_length() < 14000 else 'over 4,300'} digits"
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        text = repr(type(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (as it was, after): for code that makes millions of
    acyclic objects, which reference counting frees anyway."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def check_shape(episode: Episode) -> None:
    """Raise a DataError unless the episode has exactly one more state than actions."""
    if len(episode.states) != len(episode.actions) + 1:
        message = (f"episode {episode.episode}: `states` must have one more element than `actions`, "
                   f"got {len(episode.states)} states and {len(episode.actions)} actions")
        raise DataError([episode.where.diagnostic(message)])


def check_unique_ids(episodes: Sequence[Episode]) -> None:
    """Raise a DataError at the first episode whose id an earlier one already has."""
    if len({episode.episode for episode in episodes}) == len(episodes):
        return
    first: dict[str, Episode] = {}
    for episode in episodes:
        earlier = first.setdefault(episode.episode, episode)
        if earlier is not episode:
            message = (f"episode {episode.episode}: this id is already used, {earlier.where.describe()}; "
                       "ids must be unique")
            raise DataError([episode.where.diagnostic(message)])


def read_trajectories(path: str | os.PathLike[str]) -> list[Episode]:
    """Every episode of a JSONL file, in file order; blank lines are skipped. Raises DataError on any problem."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            lines = handle.readlines()
    except OSError as error:
        raise DataError([Diagnostic(name, NOWHERE, f"cannot read trajectories: {error.strerror}")]) from None
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):  # a byte order mark, as some editors write
        lines[0] = lines[0][3:]
    with gc_paused():
        episodes = [_episode(raw, Where(name, number)) for number, raw in enumerate(lines, start=1) if raw.strip()]
    check_unique_ids(episodes)
    return episodes


def _episode(raw: bytes, where: Where) -> Episode:
    try:
        text = raw.rstrip(b"\r\n").decode("utf-8")  # so that a column is a column of this line
        record = json.loads(text)
    except UnicodeDecodeError as error:
        raise DataError([where.diagnostic("line is not valid UTF-8", error.start + 1)]) from None
    except json.JSONDecodeError as error:
        raise DataError([where.diagnostic(f"malformed JSON: {error.msg}", error.colno)]) from None
    except RecursionError:
        raise DataError([where.diagnostic("JSON nested too deeply to read")]) from None
    except ValueError:  # an integer of over 4,300 digits (sys.set_int_max_str_digits)
        raise DataError([_too_many_digits(text, where)]) from None
    return episode_from_record(record, where)


# JSON's tokens as Python's parser reads them (json.scanner.NUMBER_RE), for finding a number in a line.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(?P<integer>-?(?:0|[1-9]\d*))(?P<rest>(?:\.\d+)?(?:[eE][-+]?\d+)?)'
                         r'|[^"\d-]+|.', re.DOTALL)


def _too_many_digits(text: str, where: Where) -> Diagnostic:
    """The first integer of a line with more digits than Python converts, at its column and with its field: Python's
    own message names neither it nor the line."""
    limit = sys.get_int_max_str_digits()
    number = next((m for m in _JSON_TOKEN.finditer(text)
                   if m["integer"] and not m["rest"] and len(m["integer"].lstrip("-")) > limit), None)
    assert number is not None, "json.loads refused an integer that is not in the line"
    digits = len(number["integer"].lstrip("-"))
    return where.diagnostic(f"{_long_integer_place(text, limit)}a number of {digits:,} digits; a number may have at "
                            f"most {limit:,}", number.start() + 1)


@dataclass(frozen=True)
class _Digits:
    """An integer too long for Python to convert, standing in for it while the line is read again."""

    order: int  # how many such integers come before it in the line


def _long_integer_place(text: str, limit: int) -> str:
    """`episode e1: field `n` of state 2 is ` for the first integer over `limit` digits of a line, found by reading
    the line again with such integers left as markers; "" where it cannot be read so (it is malformed further on)."""
    orders = itertools.count()

    def integer(digits: str) -> int | _Digits:
        return int(digits) if len(digits.lstrip("-")) <= limit else _Digits(next(orders))

    try:
        record = json.loads(text, parse_int=integer)
    except (ValueError, RecursionError):
        return ""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), record)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Digits) and value.order == 0:
            name = record.get("episode") if isinstance(record, dict) else None
            return (f"episode {name}: " if isinstance(name, str) else "") + f"{_json_path(path)} is "
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(((*path, key), child) for key, child in children)
    return ""  # its key was given again, later in the line


def _json_path(path: tuple[str | int, ...]) -> str:
    """A value's place in a record as the errors name it: field `n` of state 2, `env_reward`, `states[0].open[3]`."""
    if not path:
        return "the line"
    if len(path) == 3 and path[0] in ("states", "actions") and isinstance(path[1], int) and isinstance(path[2], str):
        return f"field `{path[2]}` of {str(path[0])[:-1]} {path[1]}"
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
    return f"`{text.removeprefix('.')}`"


def episode_from_record(record: Any, where: Where) -> Episode:
    """An Episode from a parsed JSON record (one line of a trajectory file); raises DataError on a bad shape."""

    def fail(message: str) -> DataError:
        return DataError([where.diagnostic(message)])

    if not isinstance(record, dict):
        raise fail(f"expected a JSON object (one episode a line), got {shown(record)}")
    name = record.get("episode")
    if not isinstance(name, str):
        raise fail("missing `episode` (a string)" if name is None else f"`episode` must be a string, got {shown(name)}")

    def get(key: str, kinds: tuple[type, ...], expected: str, default: Any) -> Any:
        value = record.get(key)
        if value is None:
            return default
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise fail(f"episode {name}: `{key}` must be {expected}, got {shown(value)}")
        return value

    task = get("task", (str,), "a string", name)
    instruction = get("instruction", (str,), "a string", "")
    states = _objects(get("states", (list,), "a list of objects", None), "state", name, fail)
    actions = _objects(get("actions", (list,), "a list of objects", None), "action", name, fail)
    try:
        env_reward = float(get("env_reward", (int, float), "a number", 0.0))
    except OverflowError:  # an integer beyond the float range
        env_reward = math.inf
    if not math.isfinite(env_reward):
        raise fail(f"episode {name}: `env_reward` must be a finite number, got {shown(record['env_reward'])}")
    success = get("success", (bool,), "true or false", None)
    episode = Episode(name, task, instruction, states, actions, env_reward, success, where)
    check_shape(episode)
    return episode


def _objects(items: list[Any] | None, what: str, name: str, fail: Callable[[str], DataError]) -> list[dict[str, Any]]:
    if items is None:
        raise fail(f"episode {name}: missing `{what}s` (a list of objects)")
    if set(map(type, items)) <= {dict}:
        return items
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise fail(f"episode {name}: {what} {index} must be an object, got {shown(item)}")
    return items
