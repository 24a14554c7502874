"""`tracec compile FILE [--backend B] [-o OUT]`: compile a rubric and warm the kernel cache, or write a C library."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tracec.cli.errors import EXIT_OK, UsageError, UserError
from tracec.cli.paths import kernel_cache, output_file
from tracec.cli.rubric_file import BACKENDS, add_rubric_arguments, load
from tracec.compiler.c_backend import BuildError

USER_ERRORS = (BuildError,)  # no C compiler, or one that rejects the kernel (the message names the command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rubric_arguments(parser)
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="auto (default): C where a C compiler builds it, else numba")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT",
                        help="write a C shared library artifact (the C backend)")


def run(args: argparse.Namespace) -> int:
    from tracec.compiler.backends import compile_kernel

    if args.output is not None and args.backend not in ("c", "auto"):
        raise UsageError("-o writes a C shared library; use it with --backend c (or no --backend)")
    if args.output is not None:
        output_file(args.output, inputs=(args.file,))
    started = time.perf_counter()
    compiled = load(args)
    checked_at = time.perf_counter()
    cache = kernel_cache() if args.backend != "interp" else None
    if args.output is not None:
        from tracec.compiler.c_backend import write_artifact

        try:
            write_artifact(compiled.program, args.output, cache, [op.name for op in compiled.operators])
        except OSError as error:
            raise UserError.from_os_error(error, args.output) from None
        built = str(args.output)
    else:
        kernel = compile_kernel(compiled.program, args.backend, cache)
        built = f"{kernel.backend} kernel in {cache.path}" if cache is not None else "interpreter (nothing to build)"
    done = time.perf_counter()
    print(
        f"{compiled.name}: {len(compiled.operators)} operators, {len(compiled.program.columns)} columns -> {built} "
        f"(front end {1e3 * (checked_at - started):.0f} ms, backend {1e3 * (done - checked_at):.0f} ms)"
    )
    return EXIT_OK
