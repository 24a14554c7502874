"""Frozen dataclasses from TOML: typed fields, did-you-mean for unknown keys, located errors, overrides, writing.

Generic over any tree of frozen keyword-only dataclasses (the trainer's `TrainConfig` is one): `build(cls, data)`
makes the tree from TOML's nested tables, converting ints to floats and lists to tuples and refusing anything else;
a section given in part keeps the rest of its default. Checks live in the dataclasses' `__post_init__`, which raise
`FieldError(name, value, problem)` through `require` and `choice`; `build` turns those (and its own type and key
errors) into a `ConfigError` located at the file's line (`path:line:1: error: ...`) or at the `--set` that gave the
value. `assign_override` applies `KEY=VALUE` with a TOML value (a bare word is a string) and short keys; `value_at`
and `set_at` are the one walk of a dotted key through nested tables. `with_absolute_paths` makes the files a config
names absolute, from its file's folder (from the working folder for a `--set`), `~` and `~user` expanded: the rule of
every config reader, a `~user` that names no user a located error.
Left out: TOML's dates and inline comments written back (a saved config is regenerated, not edited).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tracec.user_path import NoSuchUserError, expand_user


class ConfigError(ValueError):
    """A config value or key a user got wrong; the message names the key, the value and the fix."""


class FieldError(ValueError):
    """Raised by a section's checks with the field's name; the loader turns it into a located ConfigError."""

    def __init__(self, name: str, value: Any, problem: str):
        super().__init__(f"{name} = {shown(value)}: {problem}")
        self.name, self.value, self.problem = name, value, problem


def shown(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value) if isinstance(value, (str, list, bool)) else repr(value)


def require(ok: bool, name: str, value: Any, problem: str) -> None:
    if not ok:
        raise FieldError(name, value, problem)


def choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {shown(close[0])}? " if close else ""
        raise FieldError(name, value, f"{hint}choose one of {', '.join(shown(c) for c in choices)}")


def build(cls: type, data: Mapping[str, Any], *, where: str = "<dict>", text: str = "",
          sources: Mapping[str, str] | None = None) -> Any:
    """An instance of `cls` from nested mappings; errors located in `text` (the file) or `sources` (key -> origin)."""
    try:
        return _build(cls, data, ())
    except _Located as error:
        raise located(where, text, error.key, error.message, sources=sources) from None


def read_toml(path: str) -> tuple[dict[str, Any], str]:
    """The tables of a TOML file and its text (for locating errors later); bytes that are not UTF-8 are an error
    located at the first one, as in a `.rubric` file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: error: no such config file") from None
    from tracec.dsl.errors import RubricError
    from tracec.dsl.source_file import decode_source

    try:
        text = decode_source(data, path)
    except RubricError as error:
        raise ConfigError(error.format()) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: error: not valid TOML: {error}") from None


def assign_override(cls: type, data: dict[str, Any], item: str) -> str:
    """Apply `KEY=VALUE` to the nested tables `data`; returns the full dotted key it set."""
    key, value = _parse_override(item)
    dotted = _resolve_short_key(cls, key, item)
    set_at(data, dotted, value)
    return dotted


def value_at(tables: Mapping[str, Any], dotted: str) -> Any:
    """The value nested `tables` give the key `dotted` (`run.out`); None where they leave it out."""
    value: Any = tables
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def set_at(tables: dict[str, Any], dotted: str, value: Any) -> None:
    """Set the key `dotted` of nested `tables` to `value`, making the sections it names that are missing."""
    *sections, name = dotted.split(".")
    for part in sections:
        inner = tables.setdefault(part, {})
        if not isinstance(inner, dict):
            raise ConfigError(f"error: `{part}` is a value, not a section, so `{dotted}` cannot be set")
        tables = inner
    tables[name] = value


def expanded_path(key: str, value: str) -> Path:
    """The path `value` with `~` and `~user` expanded; a `~user` that names no user is a FieldError of `key`, never
    a relative folder of that name (a mistyped user would send the run to a folder that is not there)."""
    try:
        return expand_user(value)
    except NoSuchUserError as error:
        raise FieldError(key, value, error.strerror or str(error)) from None


def with_absolute_paths(config: Any, keys: Iterable[str], base: Path, *, where: str = "<dict>", text: str = "",
                        sources: Mapping[str, str] | None = None) -> Any:
    """`config` (a tree of dataclasses) with the paths at `keys` (a string or a list of them; "" left alone) made
    absolute: `~` and `~user` expanded, a relative one resolved from `base`, or from the working folder when `sources`
    (a `--set`) gave it. A `~user` of no user is a ConfigError located as `build` locates a bad value."""
    data = to_dict(config)
    for key in keys:
        value, folder = value_at(data, key), Path.cwd() if key in (sources or {}) else base
        try:
            if isinstance(value, list):
                set_at(data, key, [_absolute(key, path, folder) for path in value])
            elif value:
                set_at(data, key, _absolute(key, value, folder))
        except FieldError as bad:
            raise located(where, text, key, str(bad), sources=sources) from None
    return build(type(config), data)


def _absolute(key: str, value: str, base: Path) -> str:
    path = expanded_path(key, value)
    return str(path if path.is_absolute() else (base / path).resolve())


class _Located(Exception):
    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key, self.message = key, message


def _build(cls: type, data: Any, prefix: tuple[str, ...]) -> Any:
    name = ".".join(prefix)
    if not isinstance(data, Mapping):
        raise _Located(name, f"[{name}] must be a table of keys, got {shown(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            dotted = ".".join((*prefix, key))
            hint = f"did you mean `{'.'.join((*prefix, close[0]))}`?" if close else \
                f"known keys here: {', '.join(fields)}"
            raise _Located(dotted, f"unknown key `{dotted}`; {hint}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            # A section given in part keeps the rest of its default (which may differ from the section's own).
            default = _field_default(fields[key])
            if default is not None and isinstance(value, Mapping):
                value = _merged(to_dict(default), value)
            values[key] = _build(kind, value, (*prefix, key))  # type: ignore[arg-type]
        else:
            values[key] = _coerce(kind, value, ".".join((*prefix, key)))
    try:
        return cls(**values)
    except FieldError as bad:
        dotted = ".".join((*prefix, bad.name))
        raise _Located(dotted, f"{'.'.join(prefix) + '.' if prefix else ''}{bad}") from None


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _merged(base: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in given.items():
        out[key] = _merged(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, Mapping) else value
    return out


def _coerce(kind: Any, value: Any, key: str) -> Any:
    """The value as the field's type: ints widen to floats, lists become tuples; anything else is an error."""
    optional = typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind)
    if optional:
        (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise _Located(key, f"{key} = {value!r}: must be a finite number")
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if typing.get_origin(kind) is tuple and isinstance(value, (list, tuple)):
        (item,) = {arg for arg in typing.get_args(kind) if arg is not Ellipsis}
        return tuple(_coerce(item, v, key) for v in value)
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        kind, "a list" if typing.get_origin(kind) is tuple else str(kind))
    raise _Located(key, f"{key} = {shown(value)}: expected {expected}" + (" (or leave it out)" if optional else ""))


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item}: error: write --set KEY=VALUE, e.g. --set rollout.group_size=8")
    try:
        return key, tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw.strip()  # a bare word: a string (model names, paths)


def leaf_keys(cls: type, prefix: tuple[str, ...] = ()) -> list[str]:
    keys: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys.extend(leaf_keys(hints[f.name], (*prefix, f.name)))  # type: ignore[arg-type]
        else:
            keys.append(".".join((*prefix, f.name)))
    return keys


def _resolve_short_key(cls: type, key: str, item: str) -> str:
    """`iterations` stands for `run.iterations` when exactly one field has that name."""
    leaves = leaf_keys(cls)
    if key in leaves or "." in key:
        return key
    matches = [leaf for leaf in leaves if leaf.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(f"--set {item}: error: `{key}` is ambiguous: write one of {', '.join(matches)}")
    return key  # unknown: the builder's did-you-mean answers it


def located(where: str, text: str, dotted: str, message: str, *,
            sources: Mapping[str, str] | None = None) -> ConfigError:
    """A ConfigError at the `--set` that gave `dotted` (`sources`: key -> origin), else at the line of `text` that
    sets it (the file alone when no line does)."""
    origin = (sources or {}).get(dotted)
    if origin is not None:
        return ConfigError(f"{origin}: error: {message}")
    line = _line_of(text, dotted) if text else 0
    return ConfigError(f"{where}:{line}:1: error: {message}" if line else f"{where}: error: {message}")


def _line_of(text: str, dotted: str) -> int:
    """The 1-based line that sets `dotted` in a TOML text (its key, or its section's header), 0 if none."""
    *section, key = dotted.split(".")
    current: list[str] = []
    header_line = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.fullmatch(r"\[\s*([A-Za-z0-9_.\s]+?)\s*\]\s*(#.*)?", stripped)
        if header:
            current = [part.strip() for part in header.group(1).split(".")]
            if current == [*section, key]:
                header_line = number
            continue
        assign = re.match(r"([A-Za-z0-9_.]+)\s*=", stripped)
        if assign and [*current, *assign.group(1).split(".")] == [*section, key]:
            return number
    return header_line



def to_dict(config: Any) -> dict[str, Any]:
    """Nested plain values (tuples as lists, None left out): what `config_from_dict` reads back."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = to_dict(value)
        elif value is not None:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def to_toml(config: Any) -> str:
    lines: list[str] = []

    def section(values: dict[str, Any], prefix: tuple[str, ...]) -> None:
        plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
        if prefix and plain:
            lines.append(f"\n[{'.'.join(prefix)}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in plain.items())
        for key, value in values.items():
            if isinstance(value, dict):
                section(value, (*prefix, key))

    section(to_dict(config), ())
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"
