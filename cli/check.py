"""`tracec check FILE...`: parse and type-check every file named, and report every problem of every file.

A file that cannot be read (missing, a folder, under a regular file, not UTF-8) is reported like a file with errors;
the others are still checked. Exit 1 when any file failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.errors import EXIT_OK, EXIT_USER, UserError
from tracec.cli.paths import read_source
from tracec.dsl.errors import RubricError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help=".rubric files, each checked")


def run(args: argparse.Namespace) -> int:
    from tracec.dsl.ast import Schema
    from tracec.dsl.check import check_source

    failed = False
    for path in args.files:
        try:
            checked = check_source(read_source(path), str(path))
        except (RubricError, UserError) as error:
            failed = True
            print(error.format("check") if isinstance(error, UserError) else error.format(), file=sys.stderr)
            continue
        schemas = sum(isinstance(decl, Schema) for decl in checked.module.decls)  # not the built-in ones
        print(f"{path}: ok ({schemas} schemas, {len(checked.rubrics)} rubrics, {len(checked.capabilities)} "
              f"capabilities, {len(checked.environments)} environments)")
    return EXIT_USER if failed else EXIT_OK
