"""What `compile`, `explain` and `score` share: the rubric file argument and the backends; `load` compiles the
rubric it names for the commands that need no scorer (`score` makes one: `RubricScorer.from_source`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tracec.cli.paths import read_source

if TYPE_CHECKING:
    from tracec.compiler.pipeline import CompiledRubric

BACKENDS = ("auto", "numba", "c", "interp")


def add_rubric_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="a .rubric file")
    parser.add_argument("--rubric", help="which rubric of the file (default: its only one)")


def load(args: argparse.Namespace) -> CompiledRubric:
    text = read_source(args.file)  # a path that cannot be read is said before numba is imported
    from tracec.compiler.load import load_rubric

    return load_rubric(text, str(args.file), args.rubric)
