"""A seeded family of small TextWorld games for learning experiments: train seeds, held-out seeds, sparse reward.

    family = TaskFamily()                                 # custom games: 3 rooms, 5 objects, quests of 3-6 steps
    games = family.prepare(family.train_seeds + family.eval_seeds, cache)  # made once (in parallel), then cached
    env = FamilyEnvironment(family, cache)                # seed N plays game N, on the one environment protocol

Seed N is the game `tw-make custom --world-size R --nb-objects O --quest-length L --seed N` (a `CustomGame`), whose
quest length L cycles through `quest_lengths` with the seed, so each split holds every length alike. The training
seeds and the evaluation seeds are two disjoint ranges fixed by the family (`__post_init__` refuses an overlap),
never chosen after looking at results.

Games are made by `make_game`, into the cache every `CustomGame` shares, a few at a time in worker processes when
several are missing (~1.4 s a game once a worker runs; each worker pays TextWorld's start-up once).

`FamilyEnvironment` plays a game through `TextWorldEnvironment` (the canonical facts the rubric reads come from
there) with two differences that make it a learning task: the reward is sparse, 1 for a win and 0 otherwise (not
TextWorld's share of the score), each step records whether it played the next command of TextWorld's shortest
winning plan from the state it was taken in (`on_plan`: what the oracle credit reads, and a diagnostic of how
much of the plan a policy follows; `plan_next` holds that command, which TRACE's labels read), and the
observations are compact: the objective once, then per turn the game's answer in its first line, the room, the
inventory and (`list_commands`) the admissible commands, without the banner and the room's flavour text (which
would be most of every turn's tokens). The trajectory's instruction (what a
rubric reads) is the objective in lower case, as the entity facts are, so that `contains(instruction, act.obj)`
finds a name the objective capitalizes. `objective = "goal"` replaces TextWorld's objective, which spells out the
quest's steps ("open the chest, take the key from it, go east, ..."), by its goal alone (`goal_objective`: the
plan's last act, e.g. "Your goal: put red apple on table."): a family whose objective does not read as the plan.
Left out: the other TextWorld challenges, parallel quests, and games whose quest cannot be generated (the family's
options always admit one).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.textworld.env import (
    SYSTEM_PROMPT,
    CustomGame,
    GameMakeError,
    TextWorldEnvironment,
    game_path,
    is_made,
    make_game,
)
from tracec.trace_rl.envs.textworld.facts import clean_feedback, extract_command

_TITLE = re.compile(r"^-= (.+?) =-$")
OBJECTIVES = ("steps", "goal")


@dataclass(frozen=True, kw_only=True)
class TaskFamily:
    rooms: int = 3
    objects: int = 5
    quest_lengths: tuple[int, ...] = (3, 4, 5, 6)
    train_seeds: tuple[int, ...] = tuple(range(48))
    eval_seeds: tuple[int, ...] = tuple(range(100_000, 100_032))
    max_turns: int = 12  # turns an episode may take; the quest needs 3-6
    objective: str = "steps"  # steps: TextWorld's objective, which walks through the quest | goal: its last act only

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"TaskFamily: objective={self.objective!r} must be one of {', '.join(OBJECTIVES)}")
        if self.rooms < 1 or self.objects < 1 or not self.quest_lengths or min(self.quest_lengths) < 1:
            raise ValueError(f"TaskFamily: rooms={self.rooms}, objects={self.objects} and quest_lengths="
                             f"{self.quest_lengths} must be positive")
        shared = sorted(set(self.train_seeds) & set(self.eval_seeds))
        if shared:
            raise ValueError(f"TaskFamily: seeds {shared[:5]} are both training and evaluation seeds; the held-out "
                             "games must never be trained on")
        if not self.train_seeds or not self.eval_seeds or min(self.train_seeds + self.eval_seeds) < 0:
            raise ValueError("TaskFamily: give at least one training and one evaluation seed, all >= 0")
        if self.max_turns < max(self.quest_lengths):
            raise ValueError(f"TaskFamily: max_turns={self.max_turns} is shorter than the longest quest "
                             f"({max(self.quest_lengths)} steps)")

    def quest_length(self, seed: int) -> int:
        return self.quest_lengths[seed % len(self.quest_lengths)]

    def game(self, seed: int) -> CustomGame:
        """The spec of game `seed`: what it is made from and keyed by."""
        return CustomGame(seed=seed, world_size=self.rooms, nb_objects=self.objects,
                          quest_length=self.quest_length(seed))

    def game_file(self, seed: int, cache_dir: Path) -> Path:
        """Where game `seed` lives in `cache_dir` (made or not)."""
        return game_path(self.game(seed), cache_dir)

    def prepare(self, seeds: Iterable[int], cache_dir: Path, *, workers: int = 2) -> dict[int, Path]:
        """Game file of every seed, making the missing ones (in up to `workers` processes)."""
        files = {seed: self.game_file(seed, cache_dir) for seed in seeds}
        missing = [seed for seed, path in files.items() if not is_made(path)]
        if len(missing) == 1 or workers <= 1:
            for seed in missing:
                make_game(self.game(seed), cache_dir)
        elif missing:  # worker processes of this module's main: no fork of the caller (torch's thread pools)
            jobs = [[asdict(self.game(seed)) for seed in missing[w::workers]] for w in range(workers)]
            running = [subprocess.Popen([sys.executable, "-m", __name__, str(cache_dir), json.dumps(job)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for job in jobs if job]
            failures = []
            for process in running:
                _, errors = process.communicate()
                if process.returncode:
                    failures.append("\n".join(errors.strip().splitlines()[-10:]))
            if failures:
                raise GameMakeError(f"making games of the family failed:\n{failures[0]}")
        return files


class FamilyEnvironment(Environment):
    """The family on the one environment protocol: `reset(seed)` plays game `seed` (made on first use)."""

    def __init__(self, family: TaskFamily, cache_dir: Path, *, list_commands: bool = True) -> None:
        self.family, self.cache_dir, self.list_commands = family, Path(cache_dir), list_commands
        self._inner: TextWorldEnvironment | None = None
        self._game: Path | None = None
        self._on_plan: list[bool] = []
        self._plan_next: list[str] = []
        self._goal = ""

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    @property
    def admissible_commands(self) -> tuple[str, ...]:
        return self._playing().admissible_commands

    @property
    def policy_commands(self) -> tuple[str, ...]:
        """TextWorld's shortest winning plan from the current state."""
        return self._playing().policy_commands

    @property
    def objective(self) -> str:
        return self._goal if self.family.objective == "goal" else self._playing().objective

    def reset(self, seed: int) -> Observation:
        game = self.family.prepare([seed], self.cache_dir)[seed]
        if game != self._game:
            self.close()
            self._inner = TextWorldEnvironment(game, max_steps=self.family.max_turns, room_descriptions=False)
            self._game = game
            self._goal = goal_objective(self._inner) if self.family.objective == "goal" else ""
        assert self._inner is not None
        self._inner.reset(0)
        self._on_plan, self._plan_next = [], []
        return Observation(text=self._render(opening=True), role="user")

    def step(self, action: str) -> StepResult:
        inner = self._playing()
        plan = inner.policy_commands
        result = inner.step(action)
        self._on_plan.append(bool(plan) and extract_command(action) == plan[0])
        self._plan_next.append(plan[0] if plan else "")
        won = bool(inner.game_state["won"])
        return StepResult(observation=Observation(text=self._render(opening=False), role="user"), done=result.done,
                          reward=float(won) if result.done else 0.0, state=result.state, action=result.action)

    def trajectory(self, episode: str) -> dict[str, Any]:
        record = self._playing().trajectory(episode)
        record["game_score"] = record["env_reward"]  # TextWorld's share of the points (1 for a win), for reports
        record["env_reward"] = 1.0 if record["success"] else 0.0  # sparse: a win or nothing
        record["instruction"] = self.objective.lower()  # as the entity facts are: `contains` then matches
        record["on_plan"] = list(self._on_plan)
        record["plan_next"] = list(self._plan_next)  # the plan's next command at each step ("" once won)
        return record

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner, self._game = None, None

    def _playing(self) -> TextWorldEnvironment:
        if self._inner is None:
            raise RuntimeError("FamilyEnvironment: no game is being played; call reset(seed)")
        return self._inner

    def _render(self, *, opening: bool) -> str:
        state = self._playing().game_state
        lines = [f"Objective: {self.objective}"] if opening else []
        answer = _first_line(clean_feedback(state["feedback"]))
        if answer and not opening:
            lines.append(answer)
        lines.append(f"Room: {_room(state)}")
        lines.append(f"Inventory: {(state['inventory'] or '').strip()}")
        if self.list_commands:  # a policy that chooses among them (admissible mode) is given them anyway
            lines.append("Commands: " + ", ".join(state["admissible_commands"] or ()))
        return "\n".join(lines)


def goal_objective(env: TextWorldEnvironment) -> str:
    """The quest's goal without its steps: the last command of TextWorld's winning plan, and the room it is played in
    when it names none (a `drop`), e.g. "Your goal: put red apple on table." or "Your goal: drop glove in the
    cellar.". Where the things are and the way there are left to find. `env` is reset here (to play the plan)."""
    env.reset(0)
    plan = env.policy_commands
    for command in plan[:-1]:
        env.step(command)
    last = plan[-1]
    where = f" in the {_room(env.game_state)}" if last.startswith("drop ") else ""
    return f"Your goal: {last}{where}."


def _first_line(feedback: str) -> str:
    """The game's answer in one line: its first line that is no room title (the room has its own line)."""
    for line in feedback.splitlines():
        line = line.strip()
        if line and not _TITLE.match(line):
            return line
    return ""


def _room(state: Any) -> str:
    for fact in state["facts"]:
        if fact.name == "at" and fact.arguments[0].type == "P":
            return str(fact.arguments[1].name)
    return "unknown"


def family_texts(family: TaskFamily, games: Sequence[Path]) -> list[str]:
    """Text the games show a player: each game's objective, entity names, and the observations and admissible
    commands along its walkthrough (what a vocabulary of the family is built from)."""
    texts: list[str] = [SYSTEM_PROMPT]
    for game in games:
        env = TextWorldEnvironment(game, max_steps=family.max_turns)
        try:
            if family.objective == "goal":
                texts.append(goal_objective(env))
            env.reset(0)
            texts += [env.objective, *env.admissible_commands]
            for command in env.policy_commands:
                env.step(command)
                texts += [clean_feedback(env.game_state["feedback"]), *env.admissible_commands,
                          (env.game_state["inventory"] or "")]
        finally:
            env.close()
        names = json.loads(game.with_suffix(".json").read_text(encoding="utf-8")).get("infos", [])
        texts += [str(info[1].get("name") or "") for info in names if isinstance(info, list) and len(info) == 2]
    return texts


if __name__ == "__main__":  # a worker of `TaskFamily.prepare`: makes, into a cache folder, a JSON list of games
    for fields in json.loads(sys.argv[2]):
        make_game(CustomGame(**fields), Path(sys.argv[1]))
