"""`tracec toolsandbox replay --scenario NAME [--dump-world OUT.json]` and `tracec toolsandbox replay --all`: a
scenario's gold calls and messages played against its scripted user (`tracec.trace_rl.envs.toolsandbox.replay`),
the episode's messages, its similarity as ToolSandbox scores it, and optionally the final world's databases; with
`--all`, one line per scenario (similarity, name) and the count of perfect replays."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tracec.cli.errors import EXIT_OK, UsageError, UserError
from tracec.cli.paths import output_file

from tracec.atomic import write_atomic

SHOWN = 160  # a tool's answer is cut to this many characters on its line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    replay = commands.add_parser("replay", help="replay a scenario's gold calls and messages, and score them")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--scenario", metavar="NAME", help="the scenario, by its name in scenarios.json")
    which.add_argument("--all", action="store_true", help="every transcribed scenario: its similarity, one a line")
    replay.add_argument("--dump-world", type=Path, metavar="OUT.json",
                        help="with --scenario: write the final world's databases here (JSON)")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.envs.toolsandbox import ReplayError, replay_gold, shipped_scenarios
    from tracec.trace_rl.envs.toolsandbox.scenarios import SCENARIOS_FILE
    from tracec.trace_rl.envs.toolsandbox.world import DATABASES

    if args.dump_world is not None and args.all:
        raise UsageError("--dump-world: give one --scenario (a world is one scenario's)")
    if args.dump_world is not None:
        output_file(args.dump_world, inputs=[SCENARIOS_FILE])
    scenarios = shipped_scenarios()
    if args.all:
        perfect = 0
        for scenario in scenarios.scenarios.values():
            evaluation = replay_gold(scenario).evaluation
            perfect += evaluation.perfect
            print(f"{evaluation.similarity:.3f} {scenario.name}")
        print(f"perfect: {perfect}/{len(scenarios.scenarios)}")
        return EXIT_OK
    try:
        scenario = scenarios.get(args.scenario)
        result = replay_gold(scenario)
    except KeyError as error:  # no such scenario: the message says how many there are and some names
        raise UserError(str(error.args[0])) from None
    except ReplayError as error:
        raise UserError(str(error)) from None
    sandbox = result.sandbox
    for message in sandbox.messages[sandbox.first_user_index:]:
        line = _line(message)
        if line is not None:
            print(line)
    evaluation = result.evaluation
    print(f"similarity: {evaluation.similarity:.3f} (milestones {evaluation.milestone_similarity:.3f}, minefields "
          f"{evaluation.minefield_similarity:.3f}), turns: {evaluation.turn_count}, "
          f"{'perfect' if evaluation.perfect else 'not perfect'}")
    if args.dump_world is not None:
        world = {name: [dict(row) for row in sandbox.world.table(name)] for name in DATABASES}
        try:
            write_atomic(args.dump_world, [json.dumps(world, indent=2, ensure_ascii=False) + "\n"])
        except OSError as error:
            raise UserError.from_os_error(error, args.dump_world) from None
    return EXIT_OK


def _line(message: Any) -> str | None:
    """One message of the episode as a line: who said what, a tool's answer with its call; None for the agent's
    call itself (its answer's line shows it)."""
    if message.sender == "agent" and message.recipient == "execution_environment":
        return None
    if message.sender == "execution_environment":
        if message.exception is not None:
            return f"err {message.tool_name or '(unreadable call)'}: {message.exception}"
        trace = message.tool_trace[0] if message.tool_trace else {}
        arguments = json.dumps(trace.get("arguments", {}), ensure_ascii=False)
        answer = message.content if len(message.content) <= SHOWN else message.content[:SHOWN] + "..."
        return f"ok  {message.tool_name}({arguments}) -> {answer}"
    return f"{message.sender}: {message.content}"
