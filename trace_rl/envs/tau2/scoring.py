"""The benchmark's score for a tau2 episode: DB times COMMUNICATE, each 0 or 1.

DB: the final database's stable hash (sha256 of sorted-key JSON, `Db.stable_hash`) equals the hash of the
database the task's gold actions leave on a fresh copy; `Db.same_as` decides exactly that without hashing 7 MB
twice per episode. COMMUNICATE: every `communicate_info` string appears, case-insensitive and with commas
removed, in some message the agent sent to the user (tool calls are not messages). Left out: the benchmark's
NL assertions, which need an LLM judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.tasks import Task


@dataclass(frozen=True, kw_only=True)
class Score:
    db_match: bool
    communicated: tuple[bool, ...]  # one per task.communicate_info, in order

    @property
    def reward(self) -> float:
        return 1.0 if self.db_match and all(self.communicated) else 0.0


def _normal(text: str) -> str:
    return text.lower().replace(",", "")


def communicated(info: str, agent_messages: Sequence[str]) -> bool:
    """`info` appears in one of the messages, ignoring case and commas (`$1,286` says `1286`)."""
    needle = _normal(info)
    return any(needle in _normal(message) for message in agent_messages)


def score(task: Task, db: Db, agent_messages: Sequence[str], *, gold: Db) -> Score:
    """`gold`: the database after the task's gold actions (`gold.replay_gold`)."""
    return Score(
        db_match=db.same_as(gold),
        communicated=tuple(communicated(info, agent_messages) for info in task.communicate_info),
    )
