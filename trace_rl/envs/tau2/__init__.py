"""tau2-bench's airline and retail domains as environments: tools, tasks, users, scoring, trajectories.

The data (`db.json`, `policy.md`, `tasks.json`, `split_tasks.json`, `user_simulator/`) is read from the tau2
data folder (`find_data_dir`: an explicit path, $TRACEC_TAU2_DATA, or `shared/data/tau2` beside the repo);
nothing of it is copied here. Modules: `db` (copy-on-write database, stable hash), `toolkit` (typed tool
specs), `airline`/`retail` (the tools), `tasks`, `env` (domain + one tool call), `environment` (the one
environment protocol: the conversation with its user, the facts, the trajectory), `gold` (gold replay, the gold
agent and its user), `scoring`, `replay` (gold replay and the database dump, behind `tracec tau2 replay`).

Left out: the benchmark's other domains (telecom, mock) and its LLM-judged NL assertions.
"""

from tracec.trace_rl.envs.tau2.env import Domain, Tau2Outcome, Tau2Tools, find_data_dir, load_domain
from tracec.trace_rl.envs.tau2.environment import (
    Tau2Environment,
    load_guidelines,
    scripted_user,
    tau2_user,
)
from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user, replay_gold
from tracec.trace_rl.envs.tau2.replay import ReplayResult, replay
from tracec.trace_rl.envs.tau2.scoring import Score, score
from tracec.trace_rl.envs.tau2.tasks import Task, load_split, load_tasks

__all__ = [
    "Domain",
    "GoldAgent",
    "ReplayResult",
    "Score",
    "Task",
    "Tau2Environment",
    "Tau2Outcome",
    "Tau2Tools",
    "find_data_dir",
    "gold_user",
    "load_domain",
    "load_guidelines",
    "load_split",
    "load_tasks",
    "replay",
    "replay_gold",
    "score",
    "scripted_user",
    "tau2_user",
]
