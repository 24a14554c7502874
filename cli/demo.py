"""`tracec demo [--workdir DIR]`: the end-to-end demo on the examples shipped with the package (`trace_rl.demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tracec.cli.paths import kernel_cache, work_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", type=Path, default=Path("out/demo"), metavar="DIR",
                        help="where the artefacts go (default: out/demo)")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.demo import run_demo

    kernel_cache()  # the demo compiles kernels: an unwritable cache is said before any work, with its setting
    return run_demo(work_folder(args.workdir))
