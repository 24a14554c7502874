"""The capability dictionary: TRACE's `candidate_capabilities.json`, `{"candidates": [{"name", "description", ...}]}`.

Discovery writes it, labeling and selection read it (selection for the descriptions). Reading checks what the
readers rely on: a `candidates` list of objects, each with a distinct string `name` and a string `description`;
other fields (`example_trajectories`, `proposed_in`) pass through untouched. A run file records the dictionary it was
labelled against by `stamp`: a fingerprint of what the labeler reads, the names and descriptions (their order, the
file's layout and its other fields do not count), so that a copy or a reformatted file is the same dictionary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracec.trace_rl.targeting.analysis.runs import DictionaryStamp

from tracec.json_key import json_key


class DictionaryError(Exception):
    """A capability dictionary that cannot be read; the message starts with the file."""


@dataclass(frozen=True, kw_only=True)
class Capability:
    name: str
    description: str


def read_dictionary(path: str | os.PathLike[str]) -> list[Capability]:
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise DictionaryError(f"{where}: error: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise DictionaryError(f"{where}:{error.lineno}:{error.colno}: error: not JSON: {error.msg}") from None
    candidates = data.get("candidates") if isinstance(data, dict) else None
    if not isinstance(candidates, list) or not candidates:
        raise DictionaryError(f"{where}: error: a capability dictionary is an object with a non-empty "
                              "`candidates` list")
    found: list[Capability] = []
    for index, candidate in enumerate(candidates):
        name = candidate.get("name") if isinstance(candidate, dict) else None
        description = candidate.get("description", "") if isinstance(candidate, dict) else None
        if not isinstance(name, str) or not name or not isinstance(description, str):
            raise DictionaryError(f"{where}: error: candidates[{index}] needs a string `name` and `description`")
        if any(c.name == name for c in found):
            raise DictionaryError(f"{where}: error: candidates[{index}]: the name {name!r} appears twice")
        found.append(Capability(name=name, description=description))
    return found


def stamp(capabilities: Sequence[Capability], file: str | os.PathLike[str] | None = None) -> DictionaryStamp:
    """What a run labelled against `capabilities` (read from `file`, when known) records of them."""
    named = sorted((c.name, c.description) for c in capabilities)
    return DictionaryStamp(fingerprint=json_key(["dictionary", named]),
                           capabilities=tuple(c.name for c in capabilities), file=None if file is None else str(file))
