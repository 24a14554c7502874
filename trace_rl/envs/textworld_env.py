"""TextWorld as a target environment: make games with `tw-make`, play them, emit canonical facts per step.

Games are made by the `tw-make` script of the installed `textworld` (its wheel bundles Inform 7, so this works
offline) in a subprocess, into a cache folder keyed by a hash of the `tw-make` arguments and the textworld
version: a second request for the same game reuses the `.z8` and `.json`. A finished game is published with one
atomic rename, so concurrent makers of the same game never see half a folder.

`TextWorldEnv` plays one game through `textworld.start` with the infos the facts need and returns, per step, the
agent's `Observation` and the canonical state and action facts (`textworld_facts`). Left out: the gym wrappers,
batched environments, and game types other than `custom`, `tw-simple` and `tw-cooking`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

from tracec.trace_rl.envs.textworld_facts import (
    action_facts,
    clean_feedback,
    extract_command,
    state_facts,
)

REQUESTED_INFOS = (
    "facts", "admissible_commands", "inventory", "score", "max_score", "won", "lost", "policy_commands",
    "objective", "description", "feedback",
)  # fmt: skip


class GameMakeError(RuntimeError):
    """`tw-make` could not make a game; the message holds the command and the end of its output."""


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


def tw_make_path() -> Path:
    """The `tw-make` script of the running interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("tw-make")
    found = str(beside) if beside.is_file() else shutil.which("tw-make")
    if found is None:
        raise GameMakeError("tw-make not found next to the interpreter nor on PATH; install `textworld`")
    return Path(found)


def make_game(
    spec: GameSpec, cache_dir: Path, *, tw_make: Path | None = None, timeout_s: float = 600
) -> Path:
    """Path of the `.z8` game for `spec` in `cache_dir`, made by `tw-make` unless it is already there."""
    import textworld  # the package is heavy: load it when a game is made, not when this module is imported

    args = spec.tw_make_args()
    key = hashlib.sha256(json.dumps([textworld.__version__, args]).encode()).hexdigest()[:16]
    folder = Path(cache_dir) / f"{spec.challenge}-{key}"
    game = folder / "game.z8"
    if game.is_file() and game.with_suffix(".json").is_file():
        return game
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        script = tw_make or tw_make_path()
        command = [sys.executable, str(script), *args, "--output", str(staging / "game.z8"), "-f", "--silent"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise GameMakeError(f"tw-make took over {timeout_s:.0f} s: {' '.join(command)}") from None
        made = (staging / "game.z8").is_file() and (staging / "game.json").is_file()
        if done.returncode != 0 or not made:
            tail = "\n".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-15:])
            problem = (
                f"exited with status {done.returncode}" if done.returncode else "wrote no game.z8/game.json"
            )
            raise GameMakeError(f"tw-make {problem}: {' '.join(command)}\n{tail}")
        try:
            os.replace(staging, folder)
        except OSError:
            if not game.is_file():  # not a concurrent maker that published first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return game


@dataclass(frozen=True, kw_only=True)
class Observation:
    """What an agent is shown after a reset or a step."""

    objective: str
    feedback: str
    description: str
    inventory: str
    admissible_commands: tuple[str, ...]
    policy_commands: tuple[str, ...]  # TextWorld's shortest winning plan from here (the walkthrough)
    score: int
    max_score: int
    won: bool
    lost: bool

    @property
    def done(self) -> bool:
        return self.won or self.lost


class TextWorldEnv:
    """One TextWorld game; `reset` and `step` return the observation and canonical facts."""

    def __init__(self, game_file: Path) -> None:
        import textworld

        infos = textworld.EnvInfos(**{name: True for name in REQUESTED_INFOS})
        with warnings.catch_warnings():
            # Jericho knows no tw-make game and says so; TextWorld tracks score and state itself.
            warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
            self._env = textworld.start(str(game_file), request_infos=infos)
        self._game_state: Any = None

    @property
    def game_state(self) -> Any:
        """TextWorld's own `GameState` after the last reset or step (for checks against its view)."""
        return self._game_state

    @property
    def task(self) -> str:
        """The game's TextWorld id: rollouts of the same game share it."""
        return str(self._game_state["extra.uuid"])

    def reset(self) -> tuple[Observation, dict[str, Any]]:
        self._game_state = self._env.reset()
        return _observation(self._game_state), state_facts(self._game_state)

    def step(self, text: str) -> tuple[Observation, dict[str, Any], dict[str, Any]]:
        """Play the command in the agent's reply `text`; returns observation, next state and action facts."""
        if self._game_state is None:
            raise RuntimeError("TextWorldEnv.step before reset")
        before = self._game_state
        command = extract_command(text)
        after, _, _ = self._env.step(command)
        self._game_state = after
        action = action_facts(
            text=text,
            command=command,
            admissible_before=before["admissible_commands"],
            score_before=before["score"] or 0,
            score_after=after["score"] or 0,
        )
        return _observation(after), state_facts(after), action

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _observation(state: Any) -> Observation:
    return Observation(
        objective=state["objective"] or "",
        feedback=clean_feedback(state["feedback"]),
        description=(state["description"] or "").strip(),
        inventory=(state["inventory"] or "").strip(),
        admissible_commands=tuple(state["admissible_commands"] or ()),
        policy_commands=tuple(state["policy_commands"] or ()),
        score=int(state["score"] or 0),
        max_score=int(state["max_score"] or 0),
        won=bool(state["won"]),
        lost=bool(state["lost"]),
    )
