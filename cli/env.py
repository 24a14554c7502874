"""`tracec env`: show a capability environment's task for a seed, play it by hand, or validate it.

    tracec env FILE [--seed N] [--play] [--max-steps N] [--call-format native|text] [--name ENV]
    tracec env validate FILE [--seeds N] [--first-seed N] [--name ENV]

Exit 0 when all is well, 1 on a user error (a located message) or a failed validation (with its reason), 2 on a
usage error (an option of the other form, a count out of range).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.errors import EXIT_OK, EXIT_USER, UsageError
from tracec.cli.paths import read_source
from tracec.dsl.env_model import MAX_STEPS
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT

from tracec.arguments import integer

USAGE = """
  tracec env FILE [--seed N] [--play] [--max-steps N] [--call-format native|text] [--name ENV]
  tracec env validate FILE [--seeds N] [--first-seed N] [--name ENV]"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = USAGE
    parser.add_argument("words", nargs="+", metavar="[validate] FILE", help="the environment's .rubric file")
    parser.add_argument("--name", help="which environment of the file (default: its only one)")
    parser.add_argument("--seed", type=integer(0), help="the task instance to show or play (default 0)")
    parser.add_argument("--play", action="store_true", help="type the agent's turns, one a line")
    parser.add_argument("--max-steps", type=integer(1, MAX_STEPS), help=f"1..{MAX_STEPS} (default: the file's limit)")
    parser.add_argument("--call-format", choices=CALL_FORMATS,
                        help="how the gold solution is spelt and --play gives the tools: as JSON schemas, calls "
                             "as <tool_call> (native), or listed with <action> calls (text); default "
                             f"{DEFAULT_CALL_FORMAT}, training's; --play reads either spelling")
    parser.add_argument("--seeds", type=integer(1, 1_000_000), help="validate: how many seeds (default 100)")
    parser.add_argument("--first-seed", type=integer(0), help="validate: the first seed (default 0)")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.envs.capability import compile_environment

    validating = args.words[0] == "validate"
    if len(args.words) != (2 if validating else 1):
        raise UsageError(f"expected FILE or `validate FILE`, got {' '.join(args.words)}")
    wrong = ("--seed", "--play", "--max-steps", "--call-format") if validating else ("--seeds", "--first-seed")
    given = [option for option in wrong if getattr(args, option[2:].replace("-", "_")) not in (None, False)]
    if given:
        form = "tracec env validate FILE" if validating else "tracec env FILE"
        raise UsageError(f"{', '.join(given)} does not go with `{form}`")
    path = Path(args.words[-1])
    program = compile_environment(read_source(path), str(path), name=args.name)
    if validating:
        from tracec.trace_rl.envs.capability.validate import validate

        report = validate(program, seeds=args.seeds or 100, first_seed=args.first_seed or 0)
        print(report.render())
        return EXIT_OK if report.ok else EXIT_USER
    from tracec.trace_rl.envs.capability.shell import describe, play

    call_format = args.call_format or DEFAULT_CALL_FORMAT  # None until given: `validate` refuses the flag
    if args.play:
        play(program, args.seed or 0, sys.stdin, sys.stdout, max_steps=args.max_steps, call_format=call_format)
    else:
        sys.stdout.write(describe(program, args.seed or 0, call_format))
    return EXIT_OK

