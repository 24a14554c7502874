"""The expert guidance of a capability environment (TRACE's hint), and the check that it gives no solution away.

A hinted rollout (`rollout.hint_ratio`) sees the guidance in an `<expert_guidance>` block. TRACE's environment
generation asks for soft guidance, "what to think about, what information matters, what order to approach things
in -- but NOT the literal tool calls or arguments", aimed at lifting a hinted rollout's success to about 60-80%, not
to 100%. So the guidance is:
- the environment's `hint "..."` line, written with the environment: plain text, the same for every seed, so it
  holds none of a task's values; or, without one,
- `derived_hint`: guidance read off the shape of the solution (whether it looks before it changes, how many changes,
  whether the user wants a value back), which names no tool and no argument.
`gives_away(hint, calls)` is the check that no hint contains a gold call: the call written out (`tool(...)`, its
`<action>` or `<tool_call>` form, the JSON of a call naming the tool), or the tool's name with every one of the
call's argument values. Validation runs it on every seed's calls (`validate.validate`), so a written hint that
gives a call away fails validation, and an LLM-written environment gets the failure back to repair.
Left out: judging whether guidance helps (calibration with hinted rollouts would measure it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tracec.trace_rl.envs.capability.expr import show
from tracec.trace_rl.envs.toolcall import ToolCall, parse_tool_call


def derived_hint(kinds: Sequence[str], reports: bool) -> str | None:
    """Guidance from the solution's shape: `kinds` its calls' tool kinds in order (`query` | `mutate`), `reports`
    whether the user asks for a value back; None when the task needs no call and no answer."""
    if not kinds and not reports:
        return None
    changes = [i for i, kind in enumerate(kinds) if kind == "mutate"]
    looks_first = "query" in kinds[:changes[0]] if changes else "query" in kinds
    lines = []
    if looks_first:
        lines.append("Before you act, look up the records the request refers to and read them closely: what the "
                     "user says and what the records hold may differ, and the records decide.")
    if changes:
        lines.append("Check that each change is allowed by what you found before you make it, and change only what "
                     "the user asked for.")
        if len(changes) > 1:
            lines.append("More than one change is needed: make them in an order in which each can succeed, and "
                         "finish all of them before you reply.")
    else:
        lines.append("Nothing needs to change: find what the user asks about.")
    lines.append("When you are done, tell the user" + (", with the value they asked for taken from the tools' "
                                                       "results, not guessed." if reports else "."))
    return " ".join(lines)


def gives_away(hint: str, calls: Sequence[ToolCall]) -> ToolCall | None:
    """The first of `calls` that `hint` contains (written out, or its tool's name with all its argument values);
    None when the hint gives none away."""
    folded = hint.casefold()
    parsed = parse_tool_call(hint)
    for call in calls:
        name = call.name.casefold()
        if isinstance(parsed, ToolCall) and parsed.name.casefold() == name:
            return call  # an <action>, <tool_call> or JSON call of the tool
        if re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", folded) or _json_name(name).search(folded):
            return call  # the call written out, in prose or as JSON
        if _mentions(folded, name) and all(_mentions(folded, v.casefold()) for v in _shown(call.arguments)):
            return call
    return None


def _json_name(name: str) -> re.Pattern[str]:
    return re.compile(rf'"name"\s*:\s*{re.escape(json.dumps(name))}')


def _mentions(text: str, word: str) -> bool:
    """`word` in `text`, not as a piece of a longer word (`R1` is not in `R12`)."""
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", text) is not None


def _shown(arguments: dict[str, Any]) -> list[str]:
    """How each argument's value reads in text: a string as itself, anything else as the language shows it."""
    return [value if isinstance(value, str) else show(value) for value in arguments.values()]
