"""`tracec score FILE --trajectories T.jsonl|T.parquet|T.arrow [-o OUT.jsonl|OUT.parquet]`: operators, rewards and
advantages per step.

Without `-o` the records go to stdout as JSONL; with it, the file's ending says the format (any other ending is a
usage error, never a silent JSONL), and the file is written whole or not at all. Reading, scoring and writing are
`tracec.runtime.scoring.score_file`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.errors import EXIT_OK, UserError
from tracec.cli.paths import input_file, kernel_cache, output_file, read_source
from tracec.cli.rubric_file import BACKENDS, add_rubric_arguments
from tracec.compiler.c_backend import BuildError

USER_ERRORS = (BuildError,)  # no C compiler, or one that rejects the kernel (the message names the command)

OUTPUT_SUFFIXES = (".jsonl", ".parquet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rubric_arguments(parser)
    parser.add_argument("--trajectories", type=Path, required=True, metavar="T",
                        help=".jsonl, .parquet or .arrow (docs/trajectories.md)")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT",
                        help=".jsonl or .parquet (default: JSONL on stdout)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="auto (default): C where a C compiler builds it, else numba")


def run(args: argparse.Namespace) -> int:
    if args.output is not None:
        output_file(args.output, OUTPUT_SUFFIXES, inputs=(args.trajectories, args.file))
    input_file(args.trajectories)
    text = read_source(args.file)  # a path that cannot be read is said before numba is imported
    cache = kernel_cache() if args.backend != "interp" else None
    from tracec.runtime.scoring import RubricScorer, score_file

    scorer = RubricScorer.from_source(text, str(args.file), args.rubric, args.backend, cache)
    try:
        summary = score_file(scorer, args.trajectories, args.output)
    except OSError as error:
        if args.output is None or isinstance(error, BrokenPipeError):
            raise
        raise UserError.from_os_error(error, args.output) from None
    if args.output is not None:
        print(summary, file=sys.stderr)
    return EXIT_OK
