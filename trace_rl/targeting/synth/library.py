"""The environment library: shipped environments a capability can use before any LLM is asked to write one.

Each `.rubric` file of the library folder (default `examples/envs/`) declares one environment with its
`capability`. A capability matches an environment when its name equals the environment's capability or name
(case and separators folded); failing that, an LLM may judge from the descriptions (`{"match": NAME or null}`,
schema-checked, through the repair loop). A user with a weak local model so still gets a working environment for
the capabilities the library covers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.repair import ask_json
from tracec.trace_rl.targeting.synth.reference import MissingReference


@dataclass(frozen=True, kw_only=True)
class LibraryEnvironment:
    path: Path
    name: str
    capability: str
    description: str


def load_library(folder: Path, *, fix: str = "pass --library DIR or --no-library") -> list[LibraryEnvironment]:
    """The environments of `folder`; a missing folder is a MissingReference whose message ends in `fix` (the
    caller's own setting: a flag, or a config key)."""
    if not folder.is_dir():
        raise MissingReference(f"{folder}: the environment library is not there; {fix}")
    found = []
    for path in sorted(folder.glob("*.rubric")):
        program = load_environment(str(path))
        found.append(LibraryEnvironment(path=path, name=program.name, capability=program.capability or "",
                                        description=program.description))
    return found


def fold(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def match_by_name(capability: str, library: Sequence[LibraryEnvironment]) -> LibraryEnvironment | None:
    wanted = fold(capability)
    return next((e for e in library if wanted in (fold(e.capability), fold(e.name))), None)


def match_by_judgement(backend: SamplingBackend, capability: str, description: str,
                       library: Sequence[LibraryEnvironment], *, log: CallLog, tries: int) -> LibraryEnvironment | None:
    """The environment an LLM judges to train `capability`, or None when it judges that none does."""
    if not library:
        return None
    names = [e.name for e in library]
    listed = "\n".join(f"- {e.name}: trains {e.capability}: {e.description}" for e in library)
    schema: dict[str, Any] = {"type": "object", "required": ["match"],
                              "properties": {"match": {"enum": [*names, None]}, "reason": {"type": "string"}}}
    prompt = [{"role": "user", "content": (
        f"A training environment is wanted for this capability of an AI agent:\n{capability}: {description}\n\n"
        f"These environments exist:\n{listed}\n\nDoes one of them train exactly this capability (not a related "
        'one)? Reply with only a JSON object: {"match": "ENVIRONMENT_NAME" or null, "reason": "..."}')}]
    accepted = ask_json(backend, prompt, schema, log=log, purpose=f"library match for {capability}", tries=tries,
                        sampling=Sampling(temperature=0.0, max_tokens=200))
    chosen = accepted.value["match"]
    return next((e for e in library if e.name == chosen), None)
