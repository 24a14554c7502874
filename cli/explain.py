"""`tracec explain FILE`: the operator table (name, category, weight), the lowered IR and the fact plan."""

from __future__ import annotations

import argparse

from tracec.cli.errors import EXIT_OK
from tracec.cli.rubric_file import add_rubric_arguments, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rubric_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from tracec.compiler.explain import explain

    print(explain(load(args)), end="")
    return EXIT_OK
