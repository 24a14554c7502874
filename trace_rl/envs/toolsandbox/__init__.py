"""ToolSandbox (Apple's stateful, conversational tool-use benchmark) as a tracec target: its world, tools,
scenarios, scoring, gold replays and environment, written anew from the benchmark's public code.

Modules: `clock` (the episode's fixed now and zone), `world` (the four databases, the base state), `toolkit` (tool
specs, argument binding, errors), the tools by what they touch (`device`, `contacts`, `messaging`, `reminders`,
`utilities`, `holidays`, `web`; `search` their shared filter, `catalog` all of them), `fuzzy`, `porter`, `rouge`
(the benchmark's text measures), `sandbox` (an episode's messages and snapshots), `scenarios` (the data file
`scenarios.json`, and selections of it by name or category), `similarity` and `milestones` (scoring), `replay`
(episode start, gold replay), `environment` (the one environment protocol), `user` (the benchmark's user simulator
on a chat model) and `metrics` (the per-category numbers of evaluation records). `docs/toolsandbox.md` lists what
is transcribed, what is left out and why.

Left out: the scenarios whose score needs a web API's answer (the benchmark's RapidAPI tools), the tool
augmentations, parallel tool calls, and the user simulator's few-shot messages.
"""

from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.environment import ToolSandboxEnvironment, scripted_user
from tracec.trace_rl.envs.toolsandbox.metrics import CategoryTable, category_table
from tracec.trace_rl.envs.toolsandbox.milestones import Evaluation, Summary, evaluate, summarize
from tracec.trace_rl.envs.toolsandbox.replay import Replay, ReplayError, replay_gold, start
from tracec.trace_rl.envs.toolsandbox.sandbox import Message, Sandbox
from tracec.trace_rl.envs.toolsandbox.scenarios import (
    Scenario,
    ScenarioError,
    ScenarioSet,
    load_scenarios,
    select_scenarios,
    shipped_scenarios,
)
from tracec.trace_rl.envs.toolsandbox.user import SimulatedUser, simulated_user

__all__ = [
    "CategoryTable",
    "Clock",
    "Evaluation",
    "Message",
    "Replay",
    "ReplayError",
    "Sandbox",
    "Scenario",
    "ScenarioError",
    "ScenarioSet",
    "SimulatedUser",
    "Summary",
    "ToolSandboxEnvironment",
    "category_table",
    "evaluate",
    "load_scenarios",
    "replay_gold",
    "scripted_user",
    "select_scenarios",
    "shipped_scenarios",
    "simulated_user",
    "start",
    "summarize",
]
