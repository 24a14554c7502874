"""`tracec tau2 replay`: a task's gold actions on a fresh database, each outcome, the final hash and dump.

`replay(domain, task_id, data_dir)` is the library call; `tau2_command(argv)` is the CLI body
(`replay --domain D --task ID [--dump-db OUT.json] [--data-dir DIR]`), returning the exit code: 0 done, 1 a
user error (unknown domain or task, missing data, unwritable dump), 2 a usage error.

The dump is the database in the shape of `db.json` with every optional field present (null when unset), as
the benchmark's own models write it, so `sha256(json.dumps(dump, sort_keys=True))` is the printed hash and is
comparable with the benchmark's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.env import ToolOutcome, find_data_dir, load_domain
from tracec.trace_rl.envs.tau2.gold import replay_gold
from tracec.trace_rl.envs.tau2.tasks import GoldAction, TaskError

from tracec.atomic import write_atomic


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    domain: str
    task_id: str
    actions: tuple[GoldAction, ...]
    outcomes: tuple[ToolOutcome, ...]  # one per action
    db: Db

    @property
    def hash(self) -> str:
        return self.db.stable_hash()

    @property
    def refused(self) -> int:
        return sum(not outcome.accepted for outcome in self.outcomes)


def replay(domain: str, task_id: str, data_dir: Path | str | None = None) -> ReplayResult:
    loaded = load_domain(domain, find_data_dir(data_dir))
    task = loaded.task(task_id)
    env, outcomes = replay_gold(loaded, task)
    return ReplayResult(domain=domain, task_id=task.id, actions=task.actions, outcomes=outcomes, db=env.db)


def dump_db(db: Db, path: Path) -> None:
    """The database as one line of JSON (the C encoder: 7 MB in a blink), written whole or not at all."""
    write_atomic(Path(path), (json.dumps(db.to_dict()), "\n"))


def tau2_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="tracec tau2", description="tau2-bench airline and retail domains")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("replay", help="replay a task's gold actions on a fresh database")
    run.add_argument("--domain", required=True, choices=("airline", "retail"))
    run.add_argument("--task", required=True, help="task id, as in tasks.json")
    run.add_argument("--dump-db", type=Path, help="write the final database here (JSON)")
    run.add_argument(
        "--data-dir", type=Path, help="tau2 data folder (default: $TRACEC_TAU2_DATA or ../shared)"
    )
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as stop:  # argparse has printed the usage error (or the help)
        return 0 if stop.code in (0, None) else 2
    try:
        result = replay(args.domain, args.task, args.data_dir)
        if args.dump_db is not None:
            dump_db(result.db, args.dump_db)
    except (KeyError, ValueError, OSError, TaskError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 1
    for action, outcome in zip(result.actions, result.outcomes):
        status = "ok " if outcome.accepted else "err"
        detail = "" if outcome.accepted else f": {outcome.error}"
        print(f"{status} {action.action_id} {action.name}{detail}")
    print(f"actions: {len(result.outcomes)}, refused: {result.refused}")
    print(f"db hash: {result.hash}")
    return 0
