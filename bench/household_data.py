"""Deterministic household trajectories for `examples/household.rubric`: an agent wandering receptacles, opening,
taking and putting objects, as an ALFWorld-style game would log it.

`household_episodes(n_steps, seed)` gives plain episode records (the JSONL schema) of 5..30 steps each, grouped
8 rollouts to a task, about 270 bytes a step as JSON. Names are drawn from small vocabularies (entities repeat, as
in a real game), feedback strings from a few templates (so texts repeat too), and one step in 200 is unparsed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

OBJECTS = ["mug", "apple", "knife", "bowl", "plate", "spoon", "book", "pen", "cd", "towel", "soap", "egg", "tomato",
           "lettuce", "bread", "cup", "vase", "keychain", "pencil", "watch", "café-crème", "tasse-à-thé"]
RECEPTACLES = ["cabinet", "drawer", "fridge", "countertop", "shelf", "desk", "sinkbasin", "microwave", "garbagecan",
               "diningtable", "sofa", "bed", "dresser", "safe", "toilet", "bathtub"]
VERBS = ["go", "take", "put", "open", "close", "toggle", "clean", "heat", "cool", "use", "examine", "look",
         "inventory"]
OPENABLE = {"cabinet", "drawer", "fridge", "microwave", "safe"}


def household_episodes(n_steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Episodes whose steps add up to exactly n_steps (the last one is cut to fit)."""
    rng = random.Random(seed)
    episodes: list[dict[str, Any]] = []
    steps = 0
    while steps < n_steps:
        length = min(rng.randint(5, 30), n_steps - steps)
        episodes.append(_episode(rng, len(episodes), length))
        steps += length
    return episodes


def write_jsonl(episodes: list[dict[str, Any]], path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(episode, ensure_ascii=False) + "\n" for episode in episodes)
    return path


def _episode(rng: random.Random, index: int, length: int) -> dict[str, Any]:
    task = index // 8
    task_rng = random.Random(task)  # the rollouts of a task share its instruction
    target, dest = task_rng.choice(OBJECTS), task_rng.choice(RECEPTACLES)
    instruction = f"put a {target} in the {dest}" if task % 5 else f"find a {target}"
    location = rng.choice(RECEPTACLES)
    holding: list[str] = []
    opened: list[str] = []
    states = [_state(rng, location, holding, opened, "You arrive.")]
    actions = []
    for _ in range(length):
        verb = rng.choice(VERBS)
        obj, recep = rng.choice(OBJECTS), rng.choice(RECEPTACLES)
        feedback = "Nothing happens."
        if verb == "go":
            location, feedback = recep, f"You arrive at {recep}."
            obj = recep
        elif verb == "take" and not holding:
            holding, feedback = [obj], f"You pick up the {obj} from the {location}."
        elif verb == "put" and holding:
            obj, holding, feedback = holding[0], [], f"You put the {holding[0]} in/on the {recep}."
        elif verb == "open" and recep in OPENABLE:
            obj = recep
            if recep not in opened:
                opened, feedback = sorted(opened + [recep]), f"You open the {recep}."
        action = {"verb": verb, "obj": obj, "recep": recep, "parsed": rng.random() >= 0.005,
                  "text": f"{verb} {obj}"}
        if rng.random() < 0.02:
            del action["recep"]  # a missing fact
        actions.append(action)
        states.append(_state(rng, location, holding, opened, feedback))
    return {"episode": f"ep{index:06d}", "task": f"task{task:05d}", "instruction": instruction, "states": states,
            "actions": actions, "env_reward": float(rng.random() < 0.3), "success": rng.random() < 0.3}


def _state(rng: random.Random, location: str, holding: list[str], opened: list[str], feedback: str) -> dict[str, Any]:
    visible = rng.sample(OBJECTS, rng.randint(0, 6))
    return {"location": location, "holding": list(holding), "visible": visible, "opened": list(opened),
            "feedback": feedback}
