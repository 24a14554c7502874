"""A tau2 domain: its database, tools, policy and tasks, and one tool call's outcome.

`load_domain` reads a domain folder once (`db.json`, `policy.md`, `tasks.json`); `Tau2Tools` is the domain's
tools over one working copy of its database. `Tau2Tools.execute` turns a parsed tool call (the shared
`<action>` / JSON format of `tracec.trace_rl.envs.toolcall`) into a `Tau2Outcome`: what the agent reads back
(`render_result` JSON, or `Error: <message>` like the benchmark), whether the call was accepted, and whether
the database changed.

Left out: the conversation (`environment.py`, the one environment protocol) and scoring (`scoring.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracec.trace_rl.envs.tau2.airline import airline_toolkit
from tracec.trace_rl.envs.tau2.db import Snapshot, load_snapshot
from tracec.trace_rl.envs.tau2.retail import retail_toolkit
from tracec.trace_rl.envs.tau2.tasks import Task, load_tasks
from tracec.trace_rl.envs.tau2.toolkit import ToolError, Toolkit
from tracec.trace_rl.envs.toolcall import ToolCall, ToolCallError, render_result

DOMAINS = {"airline": airline_toolkit, "retail": retail_toolkit}
DATA_ENV_VAR = "TRACEC_TAU2_DATA"


@dataclass(frozen=True, kw_only=True)
class Domain:
    name: str
    snapshot: Snapshot
    toolkit: Toolkit
    policy: str
    tasks: Mapping[str, Task]

    def task(self, task_id: str) -> Task:
        task = self.tasks.get(str(task_id))
        if task is None:
            raise KeyError(f"no task `{task_id}` in the {self.name} domain ({len(self.tasks)} tasks)")
        return task


def load_domain(name: str, data_dir: Path) -> Domain:
    """Read one domain folder (`<data_dir>/<name>/`); errors name the missing file."""
    if name not in DOMAINS:
        raise ValueError(f"unknown tau2 domain `{name}`; expected one of: {', '.join(sorted(DOMAINS))}")
    folder = Path(data_dir) / name
    for required in ("db.json", "policy.md", "tasks.json"):
        if not (folder / required).is_file():
            raise FileNotFoundError(f"{folder / required}: missing (is the tau2 data folder right?)")
    return Domain(
        name=name,
        snapshot=load_snapshot(name, folder / "db.json"),
        toolkit=DOMAINS[name](),
        policy=(folder / "policy.md").read_text(encoding="utf-8"),
        tasks=load_tasks(name, Path(data_dir)),
    )


def find_data_dir(explicit: Path | str | None = None) -> Path:
    """The tau2 data folder: `explicit`, else $TRACEC_TAU2_DATA, else `shared/data/tau2` beside the repo."""
    if explicit is not None:
        candidates = [Path(explicit)]
    elif os.environ.get(DATA_ENV_VAR):
        candidates = [Path(os.environ[DATA_ENV_VAR])]
    else:
        repo = Path(__file__).resolve().parents[3]
        candidates = [
            repo.parent / "shared" / "data" / "tau2",
            repo / "shared" / "data" / "tau2",
            Path.cwd().parent / "shared" / "data" / "tau2",
        ]
    for candidate in candidates:
        if (candidate / "airline").is_dir() or (candidate / "retail").is_dir():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"tau2 data not found (tried {tried}); name the folder "
                            "(env.tau2.data in a training config, "
                            f"target.tau2.data in a pipeline's, --tau2-data for evaluate and route, --data-dir for "
                            f"tau2 replay) or set {DATA_ENV_VAR}")


@dataclass(frozen=True, kw_only=True)
class Tau2Outcome:
    """One agent tool call, executed or refused."""

    tool: str | None  # None when the call did not parse
    kind: Literal["query", "mutate", "invalid"]  # invalid: malformed, or no such tool
    accepted: bool
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    changed: bool = False
    content: str = ""  # what the agent reads back
    revealed: frozenset[str] = frozenset()  # ids the result shows


class Tau2Tools:
    """A domain's tools over one episode's copy of its database."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.db = domain.snapshot.fresh()

    def execute(self, call: ToolCall | ToolCallError) -> Tau2Outcome:
        if isinstance(call, ToolCallError):
            return _refused(None, "invalid", {}, f"could not read the tool call: {call.message}")
        tool = self.domain.toolkit.tools.get(call.name)
        if tool is None:
            names = ", ".join(sorted(self.domain.toolkit.tools))
            return _refused(
                call.name, "invalid", call.arguments, f"Tool '{call.name}' not found. Tools: {names}"
            )
        try:
            result, changed = self.domain.toolkit.call(self.db, call.name, call.arguments)
        except ToolError as err:
            return _refused(call.name, tool.kind, call.arguments, str(err))
        return Tau2Outcome(
            tool=call.name,
            kind=tool.kind,
            accepted=True,
            arguments=call.arguments,
            changed=changed,
            content=render_result(result),
            revealed=frozenset(tool.ids_in(result)),
        )


def _refused(tool: str | None, kind: Any, arguments: dict[str, Any], error: str) -> Tau2Outcome:
    return Tau2Outcome(
        tool=tool, kind=kind, accepted=False, arguments=arguments, error=error, content=f"Error: {error}"
    )
