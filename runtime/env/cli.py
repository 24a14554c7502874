"""`tracec env ...`: show an environment's task for a seed, play it by hand, or validate it.

    tracec env FILE --seed N [--play] [--max-steps N] [--name ENV]
    tracec env validate FILE [--seeds N] [--first-seed N] [--name ENV]

Exit 0 when all is well, 1 on a user error (a located message) or a failed validation (with its reason),
2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tracec.dsl.errors import RubricError
from tracec.runtime.env import load_environment
from tracec.runtime.env.shell import describe, play
from tracec.runtime.env.validate import validate


def env_command(argv: Sequence[str]) -> int:
    argv = list(argv)
    validating = bool(argv) and argv[0] == "validate"
    parser = argparse.ArgumentParser(prog="tracec env validate" if validating else "tracec env")
    parser.add_argument("file")
    parser.add_argument("--name", help="which environment of the file (default: its only one)")
    if validating:
        parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
        parser.add_argument("--first-seed", type=int, default=0)
    else:
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--play", action="store_true", help="type the agent's turns, one a line")
        parser.add_argument("--max-steps", type=int, default=None)
    try:
        args = parser.parse_args(argv[1:] if validating else argv)
    except SystemExit as stop:  # argparse has printed the usage error (or the help)
        return 0 if stop.code in (0, None) else 2
    try:
        program = load_environment(args.file, name=args.name)
        if validating:
            if args.seeds < 1:
                print(f"tracec env validate: --seeds must be at least 1, got {args.seeds}", file=sys.stderr)
                return 2
            report = validate(program, seeds=args.seeds, first_seed=args.first_seed)
            print(report.render())
            return 0 if report.ok else 1
        if args.play:
            play(program, args.seed, sys.stdin, sys.stdout, max_steps=args.max_steps)
        else:
            sys.stdout.write(describe(program, args.seed))
    except RubricError as error:
        print(error.format(), file=sys.stderr)
        return 1
    except OSError as error:
        print(f"tracec env: {error.strerror}: {error.filename}", file=sys.stderr)
        return 1
    except ValueError as error:  # an out-of-range --max-steps
        print(f"tracec env: {error}", file=sys.stderr)
        return 2
    return 0
