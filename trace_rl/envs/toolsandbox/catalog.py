"""Every ToolSandbox tool by name, and a scenario's toolbox: the tools its allow-list gives the agent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tracec.trace_rl.envs.toolsandbox import contacts, device, holidays, messaging, reminders, utilities, web
from tracec.trace_rl.envs.toolsandbox.toolkit import Tool


def all_tools() -> dict[str, Tool]:
    tools = (*device.TOOLS, *contacts.TOOLS, *messaging.TOOLS, *reminders.TOOLS, *utilities.TOOLS,
             *holidays.TOOLS, *web.TOOLS)
    return {tool.name: tool for tool in tools}


class Toolbox:
    """The tools one agent may call: the allowed ones less the denied ones, in allow-list order."""

    def __init__(self, allowed: Iterable[str], denied: Iterable[str] = (), *,
                 tools: Mapping[str, Tool] | None = None) -> None:
        known = all_tools() if tools is None else tools
        unknown = sorted({*allowed, *denied} - set(known))
        if unknown:
            raise KeyError(f"unknown tool(s) {', '.join(unknown)}; the tools are {', '.join(sorted(known))}")
        refused = set(denied)
        self.tools: Mapping[str, Tool] = {name: known[name] for name in allowed if name not in refused}

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]
