"""TRACE on the TextWorld family: the capabilities a task needs, an episode's labels, and capability environments.

    plan = gold_plan(game_file)                      # the quest's walkthrough, read from the game's own record
    needs(plan)                                      # {"navigate", "take", "unlock"}: what the task needs
    episode_labels(plan, trajectory)                 # {"unlock": "LACKING", "eat": "NA", ...}
    env = SeedListEnvironment(FamilyEnvironment(pool, games), seeds)   # reset(i) plays game seeds[i]

A capability is a kind of act a quest can need (`CAPABILITIES`, each a set of TextWorld verbs): crossing rooms,
taking things, opening containers and doors, unlocking them with their key, placing things on supporters or into
containers, eating, and closing or locking. What a task needs is read from its gold plan (TextWorld's walkthrough,
written into the game file when the game is made), never from what an agent did: a capability is NA exactly when
the plan has none of its verbs. Whether an episode shows a needed capability is read from its chances to use it:
a chance is a step at which the next command of the shortest winning plan from that state (the environment's
`plan_next`) is of the capability's kind, and the chance is taken when the episode played that command. The
capability is PRESENT when the episode took as many chances as the walkthrough has commands of its kind, and took
at least as many as it missed; LACKING otherwise, a chance never reached included (not shown is not present). So a
won episode can still lack a capability it used clumsily (a win after wandering lacks navigation), and a lost one
lacks whatever it never got done: the contrast between failures and successes that TRACE's selection reads.
This is TRACE's labelling with the labeller's judgement replaced by the game's own plan; what makes labelling runs
differ (TRACE's labeller samples) is here the collection: each run labels its own episodes of the base agent, drawn
from its own random stream, so that passing in k of n runs means passing on k of n independent samples.

A capability environment is a list of games from a pool of seeds outside the target's ranges whose plans need the
capability, played in turn (`SeedListEnvironment`), as a capability environment of TRACE's is a generator of
tasks that need one capability.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment, TaskFamily

CAPABILITIES: Mapping[str, tuple[str, ...]] = {
    "navigate": ("go",),
    "take": ("take",),
    "open": ("open",),
    "unlock": ("unlock",),
    "place": ("put", "insert", "drop"),
    "eat": ("eat",),
    "secure": ("close", "lock"),
}
DESCRIPTIONS: Mapping[str, str] = {
    "navigate": "crossing rooms: going through exits in the direction that leads to where the quest continues",
    "take": "taking the thing the quest needs, from the floor, a supporter or a container",
    "open": "opening the container or door that stands in the way",
    "unlock": "unlocking a locked container or door with its key",
    "place": "putting a thing on a supporter, into a container, or dropping it in a room",
    "eat": "eating the food the quest names",
    "secure": "closing or locking a container or door",
}
LABELS = ("NA", "PRESENT", "LACKING")


def capability_of(verb: str) -> str | None:
    """The capability a command's verb belongs to (None: a verb no quest needs, like `look`)."""
    return next((name for name, verbs in CAPABILITIES.items() if verb in verbs), None)


def gold_plan(game_file: Path) -> tuple[str, ...]:
    """The quest's walkthrough as the game file records it (TextWorld's `quests[].commands`)."""
    record = json.loads(Path(game_file).with_suffix(".json").read_text(encoding="utf-8"))
    return tuple(command for quest in record["quests"] for command in quest["commands"])


def plan_counts(plan: Sequence[str]) -> dict[str, int]:
    """How many of the plan's commands each needed capability has."""
    counts: dict[str, int] = {}
    for command in plan:
        name = capability_of(command.split()[0])
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return counts


def needs(plan: Sequence[str]) -> frozenset[str]:
    """The capabilities the task needs: those with a command in its gold plan."""
    return frozenset(plan_counts(plan))


def episode_labels(plan: Sequence[str], trajectory: Mapping[str, Any]) -> dict[str, str]:
    """Every capability's label in one episode (its `actions`, `plan_next` and `on_plan`): NA where the plan needs
    none of it; PRESENT where the episode took as many of its chances as the plan has commands of its kind, and no
    fewer than it missed; LACKING otherwise."""
    required = plan_counts(plan)
    taken: dict[str, int] = {}
    missed: dict[str, int] = {}
    for planned, on_plan in zip(trajectory["plan_next"], trajectory["on_plan"]):
        name = capability_of(planned.split()[0]) if planned else None
        if name is not None:
            tally = taken if on_plan else missed
            tally[name] = tally.get(name, 0) + 1
    return {name: "NA" if name not in required else
            "PRESENT" if taken.get(name, 0) >= max(required[name], missed.get(name, 0)) else "LACKING"
            for name in CAPABILITIES}


@dataclass(frozen=True)
class LabelledEpisode:
    episode: str  # its id in the run
    seed: int  # the game
    success: bool
    labels: dict[str, str]


def run_buckets(episodes: Iterable[LabelledEpisode]) -> dict[str, dict[str, list[str]]]:
    """TRACE's run buckets (`lacking_failed`, `present_failed`, `lacking_passed`, `present_passed`) of each
    capability; NA episodes are in none."""
    buckets: dict[str, dict[str, list[str]]] = {name: {} for name in CAPABILITIES}
    for episode in episodes:
        for name, label in episode.labels.items():
            if label != "NA":
                key = f"{label.lower()}_{'passed' if episode.success else 'failed'}"
                buckets[name].setdefault(key, []).append(episode.episode)
    return buckets


def seeds_needing(family: TaskFamily, games: Mapping[int, Path], capability: str) -> list[int]:
    """The seeds (in order) of `games`, made for `family`, whose gold plans need `capability`."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; the family's are {', '.join(CAPABILITIES)}")
    return [seed for seed, path in sorted(games.items()) if capability in needs(gold_plan(path))]


class SeedListEnvironment(Environment):
    """`inner` playing a fixed list of games: `reset(i)` plays game `seeds[i % len(seeds)]` (the trainer draws task
    indices from `0 .. len(seeds) - 1`)."""

    def __init__(self, inner: FamilyEnvironment, seeds: Sequence[int]) -> None:
        if not seeds:
            raise ValueError("SeedListEnvironment: give at least one seed")
        self.inner, self.seeds = inner, tuple(seeds)

    @property
    def system_prompt(self) -> str:
        return self.inner.system_prompt

    @property
    def admissible_commands(self) -> tuple[str, ...]:
        return self.inner.admissible_commands

    @property
    def policy_commands(self) -> tuple[str, ...]:
        return self.inner.policy_commands

    def reset(self, seed: int) -> Observation:
        return self.inner.reset(self.seeds[seed % len(self.seeds)])

    def step(self, action: str) -> StepResult:
        return self.inner.step(action)

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.inner.trajectory(episode)

    def close(self) -> None:
        self.inner.close()
