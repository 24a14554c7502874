"""The `tracec` command line: `main(argv) -> int`, the one place that parses arguments and maps errors to exit codes.

Exit codes: 0 ok, 1 user error (a located message, never a traceback), 2 usage error, 3 internal error (with the
traceback a maintainer needs); an interrupt gives 130 and a closed stdout (`tracec score ... | head`) 141, as a shell
would. stdout carries only what was asked for; progress and timings go to stderr.

A subcommand is a module of this package with two functions, `add_arguments(parser)` and `run(args) -> int`, and
one `Command` line in `COMMANDS` below. The module is imported only when its command runs (so `tracec check` never
pays for torch), and it may name the exception types of the library it calls that are the user's mistake, in
`USER_ERRORS` (exit 1 with their message as it is), and those that are a usage mistake, in `USAGE_ERRORS` (exit 2).
A type whose module imports torch is named as `"module:Class"`, so that `--help`, an argument error or a config
error never import it: it is looked up only once its module is loaded, since nothing else can have raised it.
Everything else a command raises is mapped here, once: `RubricError` (located diagnostics), `UserError` /
`UsageError` (`tracec.cli.errors`), `OSError` (the path the user gave, see `tracec.cli.paths`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from tracec.cli.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, EXIT_USER, UsageError, UserError
from tracec.dsl.errors import RubricError

from tracec import __version__
from tracec.quiet import quiet_libraries

EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    module: str  # imported when the command runs: add_arguments(parser), run(args) -> int, optional USER_ERRORS
    aliases: tuple[str, ...] = ()  # older spellings that users' scripts may still call


COMMANDS = (
    Command("check", "parse and type-check .rubric files", "tracec.cli.check"),
    Command("compile", "compile a rubric and warm the kernel cache", "tracec.cli.compile"),
    Command("explain", "print the operator table and the lowered IR", "tracec.cli.explain"),
    Command("score", "a rubric's operators, rewards, returns and advantages per step of trajectories",
            "tracec.cli.score", aliases=("eval",)),
    Command("convert", "trajectories between JSONL, Parquet and Arrow IPC, by suffix", "tracec.cli.convert"),
    Command("env", "show, play or validate a capability environment", "tracec.cli.env"),
    Command("tau2", "tau2-bench airline / retail: gold replay", "tracec.cli.tau2"),
    Command("toolsandbox", "ToolSandbox's scenarios: gold replay and its similarity", "tracec.cli.toolsandbox"),
    Command("models", "list the models tracec can load; `install` converts SmolLM2 once", "tracec.cli.models"),
    Command("train", "GRPO training of one LoRA adapter on one environment", "tracec.cli.train"),
    Command("analyze", "TRACE: discover, label and select capabilities", "tracec.cli.analyze"),
    Command("synth", "LLM-written environments and rubrics, checked and validated", "tracec.cli.synth"),
    Command("route", "TRACE: the adapter the base model routes a task to, with the label logits", "tracec.cli.route"),
    Command("evaluate", "base, each adapter and routed on a target: the pass-rate table", "tracec.cli.evaluate"),
    Command("pipeline", "TRACE end to end: analysis, environments, adapters, routing, evaluation",
            "tracec.cli.pipeline"),
    Command("demo", "TRCA against sparse GRPO on TextWorld games: trained, evaluated, plotted", "tracec.cli.demo"),
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _chosen(argv)
    try:
        module = importlib.import_module(command.module) if command is not None else None
        parser = _parser(command, module)
    except Exception:  # noqa: BLE001 - a command that cannot even be set up is our bug, never the user's
        return _internal_error()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse has printed the help, the version or the usage error
        return EXIT_OK if stop.code in (0, None) else EXIT_USAGE
    assert command is not None and module is not None  # argparse requires a known command
    return _run(command, module, args)


def entry() -> None:
    sys.exit(main())


def _chosen(argv: list[str]) -> Command | None:
    """The command the arguments name: the first one that is not an option (the top level takes no values)."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return next((command for command in COMMANDS if first in (command.name, *command.aliases)), None)


def _parser(chosen: Command | None, module: ModuleType | None) -> argparse.ArgumentParser:
    """Every command is listed (for `--help` and the usage error); only the chosen one gets its arguments."""
    parser = argparse.ArgumentParser(prog="tracec", description="Compiled, verifiable rewards for LLM-agent RL.")
    parser.add_argument("--version", action="version", version=f"tracec {__version__}")
    parser.add_argument("--library-output", action="store_true",
                        help="let the libraries' own warnings and progress bars through (transformers, torch, peft)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(command.name, aliases=command.aliases, help=command.help, description=command.help)
        if command is chosen and module is not None:
            module.add_arguments(sub)
    return parser


def _run(command: Command, module: ModuleType, args: argparse.Namespace) -> int:
    if not args.library_output:
        quiet_libraries()
    try:
        return int(module.run(args))
    except RubricError as error:
        _say(error.format())
        return EXIT_USER
    except UserError as error:
        _say(error.format(command.name))
        return EXIT_USER
    except UsageError as error:
        _say(f"tracec {command.name}: error: {error}\n(see `tracec {command.name} --help`)")
        return EXIT_USAGE
    except _declared(module, "USAGE_ERRORS") as error:  # evaluated only when an error reaches it
        _say(f"tracec {command.name}: error: {error}\n(see `tracec {command.name} --help`)")
        return EXIT_USAGE
    except _declared(module, "USER_ERRORS") as error:
        _say(str(error))
        return EXIT_USER
    except BrokenPipeError:  # the reader of stdout went away: stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:  # disk full, a path that changed under us: the message names the path
        _say(UserError.from_os_error(error).format(command.name))
        return EXIT_USER
    except MemoryError:
        _say(f"tracec {command.name}: error: out of memory (is an input far larger than intended?)")
        return EXIT_USER
    except KeyboardInterrupt:
        _say(f"tracec {command.name}: interrupted")
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - an internal bug: say so, with the traceback a maintainer needs
        return _internal_error()


def _declared(module: ModuleType, name: str) -> tuple[type[BaseException], ...]:
    """The error types `module` declares under `name`; a `"module:Class"` entry only if that module is loaded."""
    declared: tuple[type[BaseException] | str, ...] = getattr(module, name, ())
    found = []
    for entry in declared:
        if isinstance(entry, str):
            where, _, attribute = entry.partition(":")
            loaded = sys.modules.get(where)
            if loaded is not None:
                found.append(getattr(loaded, attribute))
        else:
            found.append(entry)
    return tuple(found)


def _internal_error() -> int:
    _say("tracec: internal error; please report it with the traceback below")
    traceback.print_exc()
    return EXIT_INTERNAL


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
