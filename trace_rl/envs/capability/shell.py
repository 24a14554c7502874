"""What `tracec env FILE --seed N` prints, and the `--play` loop: a person types the agent's turns.

`describe` shows the task, the tools with their signatures, the gold solution (its calls spelt as the agent writes
them in the call format, by default the one training uses) and the values to report (the seed's answers: this is a
debugging view). `play` reads one agent turn a line from a stream and prints each
observation until the episode ends, then the scores. Left out: line editing and history (wrap it in `rlwrap`).
"""

from __future__ import annotations

from typing import TextIO

from tracec.trace_rl.envs.capability.episode import CapabilityEnvironment, Scores
from tracec.trace_rl.envs.capability.expr import show
from tracec.trace_rl.envs.capability.program import Program
from tracec.trace_rl.envs.toolcall import DEFAULT_CALL_FORMAT, format_call
from tracec.trace_rl.llm import conversation


def describe(program: Program, seed: int, call_format: str = DEFAULT_CALL_FORMAT) -> str:
    scenario = program.scenario(seed)
    lines = [f"environment {program.name}: {program.description}"]
    if program.capability:
        lines.append(f"capability  {program.capability}")
    lines += [f"seed        {seed}", "", "task:", f"  {scenario.task}", "", "tools:"]
    lines += [f"  {tool.info.signature()}" for tool in program.tools.values()]
    lines += ["", f"gold solution ({call_format} calls):"]
    lines += [f"  {line}" for call in scenario.gold_calls
              for line in format_call(call.name, call.arguments, call_format).splitlines()]
    if scenario.report:
        lines += ["", "report: " + ", ".join(show(v) for v in scenario.report)]
    return "\n".join(lines) + "\n"


def play(program: Program, seed: int, lines: TextIO, out: TextIO, *, max_steps: int | None = None,
         call_format: str = DEFAULT_CALL_FORMAT) -> Scores:
    """An interactive episode; returns its scores (also when the input ends before the episode does). The prompt
    shown is the system message as a model without a tools-aware template reads it (native: the Hermes block)."""
    env = CapabilityEnvironment(program, max_steps=max_steps, call_format=call_format)
    opening = env.reset(seed)
    (system,) = conversation.fold_tools([{"role": "system", "content": env.system_prompt}], env.tools)
    out.write(f"{system['content']}\n\n{opening.role}: {opening.text}\n")
    done = False
    while not done:
        out.write("agent> ")
        out.flush()
        line = lines.readline()
        if not line:
            out.write("\n(end of input)\n")
            break
        text = line.rstrip("\n")
        if not text.strip():
            continue
        result = env.step(text)
        out.write(f"{result.observation.text}\n")
        done = result.done
    scores = env.scores()
    out.write(f"steps {env.steps}  state {scores.state:.0f}  report {scores.report:.0f}  reward {scores.reward:.3f}\n")
    return scores
