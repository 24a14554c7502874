"""`tracec convert T.jsonl -o T.parquet`: trajectories between JSONL, Parquet and Arrow IPC, formats by suffix.

What is read is checked as `tracec score` would check it (located errors, nothing written); the output is written whole
or not at all, and never over the input (the same file, or a link to it). The logic is
`tracec.runtime.facts.trajectories.files.convert_trajectories`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.errors import EXIT_OK, UsageError, UserError
from tracec.cli.paths import input_file, output_file

SUFFIXES = (".jsonl", ".parquet", ".arrow")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="T", help=" or ".join(SUFFIXES))
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help=" or ".join(SUFFIXES))


def run(args: argparse.Namespace) -> int:
    from tracec.runtime.facts.trajectories.files import convert_trajectories

    if args.file.suffix not in SUFFIXES:
        raise UsageError(f"{args.file}: a trajectory file's name must end in {' or '.join(SUFFIXES)}")
    output_file(args.output, SUFFIXES, inputs=(args.file,))
    input_file(args.file)
    try:
        episodes = convert_trajectories(args.file, args.output)
    except OSError as error:
        raise UserError.from_os_error(error, args.output) from None
    print(f"{args.output}: {episodes} episodes", file=sys.stderr)
    return EXIT_OK
