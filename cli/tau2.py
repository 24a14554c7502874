"""`tracec tau2 replay --domain D --task ID [--dump-db OUT.json] [--data-dir DIR]`: a task's gold actions on a fresh
database, each outcome, the final hash, and optionally the database dump (`tracec.trace_rl.envs.tau2.replay`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tracec.cli.errors import EXIT_OK, UserError
from tracec.cli.paths import output_file

DOMAINS = ("airline", "retail")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    replay = commands.add_parser("replay", help="replay a task's gold actions on a fresh database")
    replay.add_argument("--domain", required=True, choices=DOMAINS, help="the tau2-bench domain")
    replay.add_argument("--task", required=True, help="task id, as in tasks.json")
    replay.add_argument("--dump-db", type=Path, metavar="OUT.json", help="write the final database here (JSON)")
    replay.add_argument("--data-dir", type=Path, metavar="DIR", help=_data_dir_help())


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.envs.tau2.db import DatabaseError
    from tracec.trace_rl.envs.tau2.replay import dump_db, replay
    from tracec.trace_rl.envs.tau2.tasks import TaskError

    if args.dump_db is not None:
        output_file(args.dump_db, inputs=_domain_files(args.data_dir, args.domain))
    try:
        result = replay(args.domain, args.task, args.data_dir)
    except KeyError as error:  # no such task: the message lists how many there are
        raise UserError(str(error.args[0])) from None
    except (FileNotFoundError, TaskError, DatabaseError) as error:  # the folder, or a file of it that does not read
        raise UserError(str(error)) from None
    if args.dump_db is not None:
        try:
            dump_db(result.db, args.dump_db)
        except OSError as error:
            raise UserError.from_os_error(error, args.dump_db) from None
    for action, outcome in zip(result.actions, result.outcomes):
        status = "ok " if outcome.accepted else "err"
        detail = "" if outcome.accepted else f": {outcome.error}"
        print(f"{status} {action.action_id} {action.name}{detail}")
    print(f"actions: {len(result.outcomes)}, refused: {result.refused}")
    print(f"db hash: {result.hash}")
    return EXIT_OK


def _domain_files(data_dir: Path | None, domain: str) -> list[Path]:
    """The files of the domain's data (its database, tasks, policy), which --dump-db must not replace."""
    from tracec.trace_rl.envs.tau2.env import find_data_dir

    try:
        folder = find_data_dir(data_dir) / domain
    except FileNotFoundError:  # the replay says why
        return []
    return [path for path in folder.iterdir() if path.is_file()] if folder.is_dir() else []


def _data_dir_help() -> str:
    """The folder holding `airline/` and `retail/`, and the default as this run would find it (not a guess)."""
    from tracec.trace_rl.envs.tau2.env import DATA_ENV_VAR, find_data_dir

    try:
        found = f"now {find_data_dir()}"
    except FileNotFoundError:
        found = "none found now"
    return (f"the tau2 data folder, holding airline/ and retail/ (default: ${DATA_ENV_VAR}, else shared/data/tau2 "
            f"beside the checkout, else ../shared/data/tau2; {found})")
