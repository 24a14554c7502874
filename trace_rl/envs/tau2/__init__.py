"""tau2-bench's airline and retail domains as environments: tools, tasks, users, scoring, trajectories.

The data (`db.json`, `policy.md`, `tasks.json`, `split_tasks.json`, `user_simulator/`) is read from the tau2
data folder (`find_data_dir`: an explicit path, $TRACEC_TAU2_DATA, or `shared/data/tau2` beside the repo);
nothing of it is copied here. Modules: `db` (copy-on-write database, stable hash), `toolkit` (typed tool
specs), `airline`/`retail` (the tools), `tasks`, `env` (domain + one tool call), `user` (LLM and scripted
users), `gold` (gold replay and the gold agent), `episode` (the conversation loop), `scoring`, `facts`
(trajectory JSONL), `replay` (gold replay and the database dump, behind `tracec tau2 replay`).

Left out: the benchmark's other domains (telecom, mock) and its LLM-judged NL assertions.
"""

from tracec.trace_rl.envs.tau2.env import Domain, Tau2Env, ToolOutcome, find_data_dir, load_domain
from tracec.trace_rl.envs.tau2.episode import Episode, EpisodeConfig, run_episode
from tracec.trace_rl.envs.tau2.facts import episode_record
from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user, replay_gold
from tracec.trace_rl.envs.tau2.replay import ReplayResult, replay
from tracec.trace_rl.envs.tau2.scoring import Score, score
from tracec.trace_rl.envs.tau2.tasks import Task, load_split, load_tasks
from tracec.runtime.chat import ChatBackend
from tracec.trace_rl.envs.tau2.user import LLMUser, ScriptedUser, load_guidelines

__all__ = [
    "ChatBackend",
    "Domain",
    "Episode",
    "EpisodeConfig",
    "GoldAgent",
    "LLMUser",
    "ReplayResult",
    "Score",
    "ScriptedUser",
    "Task",
    "Tau2Env",
    "ToolOutcome",
    "episode_record",
    "find_data_dir",
    "gold_user",
    "load_domain",
    "load_guidelines",
    "load_split",
    "load_tasks",
    "replay",
    "replay_gold",
    "run_episode",
    "score",
]
