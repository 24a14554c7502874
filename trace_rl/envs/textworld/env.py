"""TextWorld as a target environment: make games, play them, emit canonical facts per step.

A game spec names the game `tw-make ARGS` makes, and `make_game` makes it in this process by the generator calls
`tw-make` runs, compiled by the Inform 7 the `textworld` wheel bundles (offline): the same game, up to the order of
a few sets, which differs between two runs of `tw-make` too, without the seconds of `tw-make`'s start-up. Games go
into a cache folder keyed by the textworld version and the `tw-make` arguments: a second request for the same game
reuses the `.z8` and `.json`. A finished game is published with one atomic rename, so concurrent makers of the same
game never see half a folder.

`TextWorldEnvironment` is the one environment protocol over a game, or over a family of games (a spec whose seed
is the episode's seed): it plays through `textworld.start` with the infos the facts need and records, per step,
the canonical state and action facts (`textworld_facts`). Left out: the gym wrappers, batched environments, and
game types other than `custom`, `tw-simple` and `tw-cooking`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import textworld
import textworld.challenges
import textworld.generator
from textworld.generator import QuestGenerationError
from textworld.generator.inform7 import CouldNotCompileGameError
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.textworld.facts import (
    action_facts,
    clean_feedback,
    extract_command,
    state_facts,
    with_history,
)

from tracec.json_key import json_key

SYSTEM_PROMPT = (
    "You are playing a text adventure game. Read the objective and what the game says, then reply with "
    "exactly one game command inside <action></action>, for example <action>take red apple</action>."
)
REQUESTED_INFOS = (
    "facts", "admissible_commands", "inventory", "score", "max_score", "won", "lost", "policy_commands",
    "objective", "description", "feedback",
)  # fmt: skip


class GameMakeError(RuntimeError):
    """TextWorld could not make a game; the message names the spec and says why."""


@dataclass(frozen=True, kw_only=True)
class CustomGame:
    """`tw-make custom`: a random house of `world_size` rooms and a quest of `quest_length` actions."""

    seed: int = 0
    world_size: int = 3
    nb_objects: int = 5
    quest_length: int = 3

    challenge = "custom"

    def __post_init__(self) -> None:
        _check_positive(self, "world_size", "nb_objects", "quest_length")

    def tw_make_args(self) -> list[str]:
        return [
            "custom", "--world-size", str(self.world_size), "--nb-objects", str(self.nb_objects),
            "--quest-length", str(self.quest_length), "--seed", str(self.seed),
        ]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SimpleGame:
    """`tw-make tw-simple`: the fixed six-room house with a drawn quest."""

    seed: int = 0
    rewards: Literal["dense", "balanced", "sparse"] = "dense"
    goal: Literal["detailed", "brief", "none"] = "detailed"

    challenge = "tw-simple"

    def __post_init__(self) -> None:
        _check_choice(self, "rewards", ("dense", "balanced", "sparse"))
        _check_choice(self, "goal", ("detailed", "brief", "none"))

    def tw_make_args(self) -> list[str]:
        return ["tw-simple", "--rewards", self.rewards, "--goal", self.goal, "--seed", str(self.seed)]


@dataclass(frozen=True, kw_only=True)
class CookingGame:
    """`tw-make tw-cooking`: find `take` of the `recipe`'s ingredients in `world_size` rooms, prepare, eat."""

    seed: int = 0
    world_size: Literal[1, 6, 9, 12] = 1
    recipe: int = 1
    take: int = 1
    skills: tuple[Literal["open", "cook", "cut", "drop"], ...] = ()

    challenge = "tw-cooking"

    def __post_init__(self) -> None:
        _check_choice(self, "world_size", (1, 6, 9, 12))
        _check_positive(self, "recipe")
        if not 0 <= self.take <= self.recipe:
            raise ValueError(f"CookingGame: take={self.take} must lie in 0..recipe={self.recipe}")
        unknown = sorted(set(self.skills) - {"open", "cook", "cut", "drop"})
        if unknown:
            raise ValueError(f"CookingGame: unknown skills {unknown}; known: open, cook, cut, drop")

    def tw_make_args(self) -> list[str]:
        flags = [f"--{skill}" for skill in sorted(set(self.skills))]
        return [
            "tw-cooking", "--recipe", str(self.recipe), "--take", str(self.take), "--go", str(self.world_size),
            *flags, "--seed", str(self.seed),
        ]  # fmt: skip


GameSpec = CustomGame | SimpleGame | CookingGame


def _check_positive(spec: object, *names: str) -> None:
    for name in names:
        value = getattr(spec, name)
        if value < 1:
            raise ValueError(f"{type(spec).__name__}: {name}={value} must be at least 1")


def _check_choice(spec: object, name: str, choices: tuple[object, ...]) -> None:
    value = getattr(spec, name)
    if value not in choices:
        raise ValueError(f"{type(spec).__name__}: {name}={value!r}; expected one of {list(choices)}")


def game_path(spec: GameSpec, cache_dir: Path) -> Path:
    """Where the `.z8` game of `spec` lives in `cache_dir`, made or not."""
    return Path(cache_dir) / f"{spec.challenge}-{json_key([textworld.__version__, spec.tw_make_args()])}" / "game.z8"


def is_made(game: Path) -> bool:
    """Whether both files of a game are there (a game's folder is published whole)."""
    return game.is_file() and game.with_suffix(".json").is_file()


def make_game(spec: GameSpec, cache_dir: Path) -> Path:
    """Path of the `.z8` game of `spec` in `cache_dir`, made here unless it is already there."""
    game = game_path(spec, cache_dir)
    if is_made(game):
        return game
    folder = game.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        _generate(spec, staging / game.name)
        try:
            os.replace(staging, folder)
        except OSError:
            if not is_made(game):  # not a concurrent maker that published first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return game


def _generate(spec: GameSpec, target: Path) -> None:
    """Write the game `tw-make` makes from the spec's arguments to `target` (and its `.json` beside it)."""
    options = textworld.GameOptions()
    options.seeds, options.path, options.force_recompile = spec.seed, str(target), True
    try:
        if isinstance(spec, CustomGame):  # what `tw-make custom` sets: its defaults, and the spec's sizes
            options.nb_rooms, options.nb_objects, options.nb_parallel_quests = spec.world_size, spec.nb_objects, 1
            chaining = options.chaining
            chaining.min_breadth, chaining.max_breadth, chaining.min_depth = 1, 5, 1
            chaining.min_length = chaining.max_length = chaining.max_depth = spec.quest_length
            options.grammar.theme = "house"
            game = textworld.generator.make_game(options)
        else:  # a challenge reads its settings as `tw-make` parses them, defaults included
            _, generate_challenge, add_arguments = textworld.challenges.CHALLENGES[spec.challenge]
            parser = argparse.ArgumentParser(prog=f"tw-make {spec.challenge}")
            add_arguments(parser)
            parser.add_argument("--seed", type=int)  # in `tw-make`'s settings too; the generator reads options.seeds
            game = generate_challenge(settings=vars(parser.parse_args(spec.tw_make_args()[1:])), options=options)
        textworld.generator.compile_game(game, options)
    except (QuestGenerationError, CouldNotCompileGameError) as error:
        raise GameMakeError(f"TextWorld could not make {spec}: {error}") from error


class TextWorldEnvironment(Environment):
    """TextWorld as the one environment protocol. `game` is a game file, which every seed plays, or a game spec
    used as a template: seed N plays the spec with `seed=N`, made into `cache_dir` on first use (`make_game`).

    A step plays the command in the agent's reply (`extract_command`); the episode ends when the game is won or
    lost, or after `max_steps` turns (None: the caller bounds them). The observation is the game's answer, the
    room when the answer does not show it (unless `room_descriptions` is off: TextWorld then skips the `look` it
    runs after every command to describe the room, about half of a step's time), the inventory and (with
    `show_admissible`) the admissible commands;
    the first one starts with the objective unless the game's opening text states it. The reward of the last
    step, and the trajectory's `env_reward`, is 1 for a win, else the fraction of the game's score reached.
    """

    def __init__(self, game: Path | str | GameSpec, *, cache_dir: Path | None = None, max_steps: int | None = None,
                 show_admissible: bool = True, room_descriptions: bool = True) -> None:
        if isinstance(game, GameSpec) and cache_dir is None:
            raise ValueError("TextWorldEnvironment: a game spec needs a cache_dir to make its games in")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"TextWorldEnvironment: max_steps={max_steps} must be at least 1 (or None)")
        self.game: Path | GameSpec = game if isinstance(game, GameSpec) else Path(game)
        self.cache_dir, self.max_steps = cache_dir, max_steps
        self.show_admissible = show_admissible
        self.room_descriptions = room_descriptions
        self._env: Any = None
        self._loaded: Path | None = None
        self._game_state: Any = None
        self.done = True

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    @property
    def game_state(self) -> Any:
        """TextWorld's own `GameState` after the last reset or step (for checks against its view)."""
        return self._game_state

    @property
    def task(self) -> str:
        """The game's TextWorld id: rollouts of the same game share it."""
        return str(self._game_state["extra.uuid"])

    @property
    def objective(self) -> str:
        return str(self._game_state["objective"] or "")

    @property
    def admissible_commands(self) -> tuple[str, ...]:
        return tuple(self._game_state["admissible_commands"] or ())

    @property
    def policy_commands(self) -> tuple[str, ...]:
        """TextWorld's shortest winning plan from the current state (the walkthrough)."""
        return tuple(self._game_state["policy_commands"] or ())

    def game_file(self, seed: int) -> Path:
        if isinstance(self.game, Path):
            return self.game
        assert self.cache_dir is not None  # checked in __init__
        return make_game(dataclasses.replace(self.game, seed=seed), self.cache_dir)

    def reset(self, seed: int) -> Observation:
        path = self.game_file(seed)
        if path != self._loaded:
            self.close()
            self._env, self._loaded = _start(path, self.room_descriptions), path
        self._game_state = self._env.reset()
        self.steps, self.done = 0, False
        self.states: list[dict[str, Any]] = [with_history(state_facts(self._game_state), None)]
        self.actions: list[dict[str, Any]] = []
        return Observation(text=self._render(opening=True), role="user")

    def step(self, action: str) -> StepResult:
        """Play the command in the agent's reply `action`."""
        if self.done or self._game_state is None:
            raise RuntimeError("the episode is over (or never began): call reset(seed)")
        before = self._game_state
        command = extract_command(action)
        after, _, _ = self._env.step(command)
        self._game_state, self.steps = after, self.steps + 1
        self.actions.append(action_facts(text=action, command=command, admissible_before=before["admissible_commands"],
                                         score_before=before["score"] or 0, score_after=after["score"] or 0))
        self.states.append(with_history(state_facts(after), self.states[-1]))
        won_or_lost = bool(after["won"]) or bool(after["lost"])
        self.done = won_or_lost or (self.max_steps is not None and self.steps >= self.max_steps)
        return StepResult(observation=Observation(text=self._render(opening=False), role="user"), done=self.done,
                          reward=self.reward() if self.done else 0.0, state=self.states[-1], action=self.actions[-1])

    def reward(self) -> float:
        """1 for a win, else the fraction of the maximum score reached (0 when the game has no score)."""
        state = self._game_state
        if state["won"]:
            return 1.0
        best = int(state["max_score"] or 0)
        return int(state["score"] or 0) / best if best > 0 else 0.0

    def trajectory(self, episode: str) -> dict[str, Any]:
        if self._game_state is None:
            raise RuntimeError("no episode to record: call reset(seed)")
        return {"episode": episode, "task": self.task, "instruction": self.objective, "states": self.states,
                "actions": self.actions, "env_reward": self.reward(), "success": bool(self._game_state["won"])}

    def _render(self, *, opening: bool) -> str:
        state = self._game_state
        feedback = clean_feedback(state["feedback"])
        description = (state.get("description") or "").strip()
        parts = [feedback]
        if opening and self.objective and self.objective not in feedback:
            parts.insert(0, f"Objective: {self.objective}")
        if description and description not in feedback:
            parts.append(f"Room: {description}")
        parts.append(f"Inventory: {(state['inventory'] or '').strip()}")
        if self.show_admissible:
            parts.append("Possible commands: " + ", ".join(self.admissible_commands))
        return "\n\n".join(part for part in parts if part)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env, self._loaded = None, None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start(game_file: Path, room_descriptions: bool = True) -> Any:
    infos = textworld.EnvInfos(**{name: True for name in REQUESTED_INFOS
                                  if room_descriptions or name != "description"})
    with warnings.catch_warnings():
        # Jericho knows no tw-make game and says so; TextWorld tracks score and state itself.
        warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
        return textworld.start(str(game_file), request_infos=infos)
