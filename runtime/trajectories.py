"""Trajectory files: JSONL, one episode a line (PIPELINE.md, "Trajectory file"), read into `Episode`s.

Reading checks the shape of every episode (an object with an `episode` id, lists of state and action objects,
`states` one longer than `actions`, a numeric `env_reward`, a boolean `success`) and stops at the first problem
with its file and line: nothing partial comes back. The fields inside states and actions are left as parsed JSON;
`tracec.runtime.facts` checks them against a schema, reporting through `Where` so that every trajectory error reads
`file:line:1: error: episode ID: ...`.

Defaults: a missing `task` makes the episode its own task, a missing `instruction` is the empty string, a missing
`env_reward` is 0.0, a missing `success` is None. Left out: compressed files, Parquet input, episodes that span lines.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracec.dsl.errors import NOWHERE, DataError, Diagnostic, Loc

_SHOWN = 60  # characters of an offending value quoted in an error


@dataclass(frozen=True)
class Where:
    """The file and 1-based line an episode was read from; line 0 for an episode built in memory."""

    path: str
    line: int

    def diagnostic(self, message: str, column: int = 1) -> Diagnostic:
        loc = Loc(self.line, column, self.line, column + 1) if self.line > 0 else NOWHERE
        return Diagnostic(self.path, loc, message)


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
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def check_shape(episode: Episode) -> None:
    """Raise a DataError unless the episode has exactly one more state than actions."""
    if len(episode.states) != len(episode.actions) + 1:
        message = (f"episode {episode.episode}: `states` must have one more element than `actions`, "
                   f"got {len(episode.states)} states and {len(episode.actions)} actions")
        raise DataError([episode.where.diagnostic(message)])


def read_trajectories(path: str | os.PathLike[str]) -> list[Episode]:
    """Every episode of a JSONL file, in file order; blank lines are skipped. Raises DataError on any problem."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            lines = handle.readlines()
    except OSError as error:
        raise DataError([Diagnostic(name, NOWHERE, f"cannot read trajectories: {error.strerror}")]) from None
    episodes = []
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            episodes.append(_episode(raw, Where(name, number)))
    return episodes


def _episode(raw: bytes, where: Where) -> Episode:
    try:
        record = json.loads(raw.rstrip(b"\r\n").decode("utf-8"))  # so that a column is a column of this line
    except UnicodeDecodeError as error:
        raise DataError([where.diagnostic("line is not valid UTF-8", error.start + 1)]) from None
    except json.JSONDecodeError as error:
        raise DataError([where.diagnostic(f"malformed JSON: {error.msg}", error.colno)]) from None

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
    env_reward = float(get("env_reward", (int, float), "a number", 0.0))
    if not math.isfinite(env_reward):
        raise fail(f"episode {name}: `env_reward` must be a finite number, got {shown(record['env_reward'])}")
    success = get("success", (bool,), "true or false", None)
    episode = Episode(name, task, instruction, states, actions, env_reward, success, where)
    check_shape(episode)
    return episode


def _objects(items: list[Any] | None, what: str, name: str, fail: Callable[[str], DataError]) -> list[dict[str, Any]]:
    if items is None:
        raise fail(f"episode {name}: missing `{what}s` (a list of objects)")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise fail(f"episode {name}: {what} {index} must be an object, got {shown(item)}")
    return items
