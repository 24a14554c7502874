"""The `tracec` command line: `main(argv) -> int`.

Exit codes: 0 ok, 1 user error (a located message, never a traceback), 2 usage error, 3 internal error.
stdout carries only what was asked for; progress and timings go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from tracec.dsl.errors import RubricError

EXIT_OK, EXIT_USER, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """Arguments that parse but do not make sense together."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracec", description="Compiled, verifiable rewards for LLM-agent RL.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="parse and type-check .rubric files")
    check.add_argument("files", nargs="+", type=Path)

    compile_ = commands.add_parser("compile", help="compile a rubric and warm the kernel cache")
    compile_.add_argument("file", type=Path)
    compile_.add_argument("--rubric", help="which rubric of the file (default: its only one)")
    compile_.add_argument("--backend", choices=("numba", "c", "interp"), default="numba")
    compile_.add_argument("-o", "--output", type=Path, help="write a C shared library artifact (C backend)")

    explain = commands.add_parser("explain", help="print the lowered IR and the operator table")
    explain.add_argument("file", type=Path)
    explain.add_argument("--rubric")

    eval_ = commands.add_parser("eval", help="operators, rewards, returns and advantages per step")
    eval_.add_argument("file", type=Path)
    eval_.add_argument("--trajectories", type=Path, required=True)
    eval_.add_argument("-o", "--output", type=Path, help=".jsonl or .parquet (default: JSONL on stdout)")
    eval_.add_argument("--rubric")
    eval_.add_argument("--backend", choices=("numba", "c", "interp"), default="numba")

    env = commands.add_parser("env", help="instantiate, play or validate a capability environment")
    env.add_argument("args", nargs=argparse.REMAINDER, help="FILE --seed N [--play] | validate FILE [--seeds N]")

    tau2 = commands.add_parser("tau2", help="tau2-bench airline / retail: gold replay and scoring")
    tau2.add_argument("args", nargs=argparse.REMAINDER, help="replay --domain D --task ID [--dump-db OUT.json]")

    models = commands.add_parser("models", help="list the models tracec can load; `install` converts SmolLM2 once")
    models.add_argument("action", nargs="?", choices=("list", "install"), default="list")

    from tracec.trace_rl.analysis.cli import add_analyze_arguments

    add_analyze_arguments(commands.add_parser("analyze", help="TRACE: discover, label and select capabilities"))
    from tracec.trace_rl.synth.cli import add_synth_arguments

    add_synth_arguments(commands.add_parser("synth", help="LLM-written environments and rubrics, checked and validated"))

    demo = commands.add_parser("demo", help="the end-to-end demo on the shipped examples")
    demo.add_argument("--workdir", type=Path, default=Path("out/demo"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_OK if exit_.code == 0 else EXIT_USAGE
    try:
        return int(_COMMANDS[args.command](args) or EXIT_OK)
    except RubricError as error:
        print(error.format(), file=sys.stderr)
        return EXIT_USER
    except UsageError as error:
        print(f"tracec {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (FileNotFoundError, IsADirectoryError, PermissionError) as error:
        print(f"tracec {args.command}: {error.strerror}: {error.filename}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        return EXIT_USER
    except Exception:  # an internal bug: say so, with the traceback a maintainer needs
        print("tracec: internal error; please report it with the traceback below", file=sys.stderr)
        traceback.print_exc()
        return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())


# ---------------------------------------------------------------------------------------------- commands


def _check(args: argparse.Namespace) -> int:
    from tracec.dsl.ast import Schema
    from tracec.dsl.check import check
    from tracec.dsl.parse import parse_file

    failures: list[RubricError] = []
    for path in args.files:
        try:
            checked = check(parse_file(str(path)))
        except RubricError as error:
            failures.append(error)
            continue
        schemas = sum(isinstance(decl, Schema) for decl in checked.module.decls)  # not the built-in ones
        counts = f"{schemas} schemas, {len(checked.rubrics)} rubrics, {len(checked.capabilities)} capabilities, " \
                 f"{len(checked.environments)} environments"
        print(f"{path}: ok ({counts})")
    for error in failures:
        print(error.format(), file=sys.stderr)
    return EXIT_USER if failures else EXIT_OK


def _compile(args: argparse.Namespace) -> int:
    from tracec.compiler.backends import compile_kernel
    from tracec.runtime.evaluate import default_cache, load_rubric

    if args.output is not None and args.backend != "c":
        raise UsageError("-o writes a C shared library; use it with --backend c")
    started = time.perf_counter()
    compiled = load_rubric(args.file.read_text(encoding="utf-8"), str(args.file), args.rubric)
    checked_at = time.perf_counter()
    if args.output is not None:
        from tracec.compiler.c_backend import write_artifact

        write_artifact(compiled.program, args.output, default_cache(), [op.name for op in compiled.operators])
        built = str(args.output)
    else:
        compile_kernel(compiled.program, args.backend, default_cache())
        built = f"{args.backend} kernel in {default_cache().path}"
    done = time.perf_counter()
    print(
        f"{compiled.name}: {len(compiled.operators)} operators, {len(compiled.program.columns)} columns -> {built} "
        f"(front end {1e3 * (checked_at - started):.0f} ms, backend {1e3 * (done - checked_at):.0f} ms)"
    )
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from tracec.compiler.explain import explain
    from tracec.runtime.evaluate import load_rubric

    print(explain(load_rubric(args.file.read_text(encoding="utf-8"), str(args.file), args.rubric)), end="")
    return EXIT_OK


def _eval(args: argparse.Namespace) -> int:
    from tracec.runtime.evaluate import RubricScorer
    from tracec.runtime.output import write_records

    scorer = RubricScorer.from_file(args.file, args.rubric, args.backend)
    result = scorer.evaluate(args.trajectories)
    if args.output is None:
        for record in result.records():
            print(json.dumps(record))
    else:
        write_records(result.records(), args.output)
        print(f"{args.output}: {result.batch.n_transitions} steps of {len(result.batch.episodes)} episodes",
              file=sys.stderr)
    return EXIT_OK


def _env(args: argparse.Namespace) -> int:
    from tracec.runtime.env.cli import env_command

    return env_command(args.args)


def _tau2(args: argparse.Namespace) -> int:
    from tracec.trace_rl.envs.tau2.replay import tau2_command

    return tau2_command(args.args)


def _models(args: argparse.Namespace) -> int:
    from tracec.trace_rl.models import ModelError, install_smollm2, list_models

    try:
        if args.action == "install":
            print(f"installed: {install_smollm2()}")
            return EXIT_OK
        for info in list_models():
            where = "built in code" if info.path is None else str(info.path)
            print(f"{info.name}\t{info.parameters:,} parameters\t{where}")
    except ModelError as error:
        print(f"tracec models: {error}", file=sys.stderr)
        return EXIT_USER
    return EXIT_OK


def _analyze(args: argparse.Namespace) -> int:
    from tracec.trace_rl.analysis.cli import analyze_command

    return analyze_command(args)


def _synth(args: argparse.Namespace) -> int:
    from tracec.trace_rl.synth.cli import synth_command

    return synth_command(args)


def _demo(args: argparse.Namespace) -> int:
    from tracec.trace_rl.demo import run_demo

    return run_demo(args.workdir)


_COMMANDS = {
    "check": _check,
    "compile": _compile,
    "explain": _explain,
    "eval": _eval,
    "env": _env,
    "tau2": _tau2,
    "models": _models,
    "analyze": _analyze,
    "synth": _synth,
    "demo": _demo,
}
