"""ToolSandbox (Apple's stateful, conversational tool-use benchmark) as a tracec target: its world, tools,
scenarios, scoring, gold replays and environment, written anew from the benchmark's public code.

Modules: `clock` (the episode's fixed now and zone), `world` (the four databases, the base state), `toolkit` (tool
specs, argument binding, errors), the tools by what they touch (`device`, `contacts`, `messaging`, `reminders`,
`utilities`, `holidays`, `web`; `search` their shared filter, `catalog` all of them), `fuzzy`, `porter`, `rouge`
(the benchmark's text measures), `sandbox` (an episode's messages and snapshots), `scenarios` (the data file
`scenarios.json`), `similarity` and `milestones` (scoring), `replay` (episode start, gold replay) and `environment`
(the one environment protocol). `docs/toolsandbox.md` lists what is transcribed, what is left out and why.

Left out: the scenarios whose score needs a web API's answer (the benchmark's RapidAPI tools), the tool
augmentations, parallel tool calls, and an LLM user simulator.
"""

from tracec.trace_rl.envs.toolsandbox.clock import Clock
from tracec.trace_rl.envs.toolsandbox.environment import ToolSandboxEnvironment, scripted_user
from tracec.trace_rl.envs.toolsandbox.milestones import Evaluation, Summary, evaluate, summarize
from tracec.trace_rl.envs.toolsandbox.replay import Replay, ReplayError, replay_gold, start
from tracec.trace_rl.envs.toolsandbox.sandbox import Message, Sandbox
from tracec.trace_rl.envs.toolsandbox.scenarios import Scenario, ScenarioError, ScenarioSet, load_scenarios

__all__ = [
    "Clock",
    "Evaluation",
    "Message",
    "Replay",
    "ReplayError",
    "Sandbox",
    "Scenario",
    "ScenarioError",
    "ScenarioSet",
    "Summary",
    "ToolSandboxEnvironment",
    "evaluate",
    "load_scenarios",
    "replay_gold",
    "scripted_user",
    "start",
    "summarize",
]
