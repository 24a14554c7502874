"""`tracec tau2 replay`: a task's gold actions on a fresh database, each outcome, the final hash and dump.

`replay(domain, task_id, data_dir)` is the library call behind `tracec tau2 replay` (`tracec.cli.tau2`); it raises
`KeyError` for an unknown task, `ValueError` for an unknown domain and `FileNotFoundError` for missing data.

The dump is the database in the shape of `db.json` with every optional field present (null when unset), as
the benchmark's own models write it, so `sha256(json.dumps(dump, sort_keys=True))` is the printed hash and is
comparable with the benchmark's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.env import Tau2Outcome, find_data_dir, load_domain
from tracec.trace_rl.envs.tau2.gold import replay_gold
from tracec.trace_rl.envs.tau2.tasks import GoldAction

from tracec.atomic import write_atomic


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    domain: str
    task_id: str
    actions: tuple[GoldAction, ...]
    outcomes: tuple[Tau2Outcome, ...]  # one per action
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
