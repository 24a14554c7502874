"""The ToolSandbox target's settings (`[target.toolsandbox]` of a pipeline config, and `tracec evaluate
--target toolsandbox`), and what a run's hashes leave out of them.

    ToolSandboxTargetSection(scenarios=("state_dependency",), user="base")

`fingerprint_values` takes a section's plain values (`to_dict`) and drops the ToolSandbox settings where they are
their defaults (`target.toolsandbox`, the trainer's `env.toolsandbox`): they came after runs of other targets were
hashed, and a setting every such run has at its default must not make their steps, or their evaluation folders,
out of date. Left out: the settings' use (`pipeline.targets` makes the target's domain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracec.trace_rl.envs.config import ToolSandboxEnvSection, check_toolsandbox_scenarios

from tracec.config_io import choice, to_dict


@dataclass(frozen=True, kw_only=True)
class ToolSandboxTargetSection:
    scenarios: tuple[str, ...] = ()  # scenario names or categories; () = all 101 transcribed (the table's one domain)
    user: str = "base"  # base: the benchmark's user simulator on the base model (TRACE) | scripted: the fixed replies

    def __post_init__(self) -> None:
        check_toolsandbox_scenarios(self.scenarios)
        choice("user", self.user, ("base", "scripted"))


def fingerprint_values(values: dict[str, Any]) -> dict[str, Any]:
    """`values` without `toolsandbox` (a target's) or `env.toolsandbox` (a trainer's) where it is the default."""
    values = dict(values)
    if values.get("toolsandbox") == to_dict(ToolSandboxTargetSection()):
        del values["toolsandbox"]
    env = values.get("env")
    if isinstance(env, dict) and env.get("toolsandbox") == to_dict(ToolSandboxEnvSection()):
        values["env"] = {k: v for k, v in env.items() if k != "toolsandbox"}
    return values
