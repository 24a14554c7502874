"""examples/household.rubric on an ALFWorld-style household: the gold plan is never punished, random play is.

The household is small and exact: receptacles (some closed until opened) hold objects; the agent goes to a
receptacle, sees what is in or on it, takes one object at a time and puts it somewhere; anything else the game
cannot do answers "Nothing happens." (ALFWorld's words). The facts are those of the `alfworld` schema.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from rubric_checks import assert_invalidity_profile
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.experiments.demo_settings import shipped_examples

OPENABLE = {"cabinet", "drawer", "fridge", "microwave"}
VERBS = ("go", "take", "put", "open", "close", "toggle", "clean", "heat", "cool", "use", "examine", "look", "inventory")
NOTHING = "Nothing happens."


@dataclass
class Household:
    contents: dict[str, set[str]]  # receptacle -> objects in or on it
    location: str = "middle of the room"
    holding: set[str] = field(default_factory=set)
    opened: set[str] = field(default_factory=set)

    def visible(self) -> set[str]:
        if self.location not in self.contents:
            return set()
        shown = self.contents[self.location] if self.location not in OPENABLE or self.location in self.opened else set()
        return {self.location, *shown}

    def state(self, feedback: str) -> dict[str, Any]:
        return {"location": self.location, "holding": sorted(self.holding), "visible": sorted(self.visible()),
                "opened": sorted(self.opened), "feedback": feedback}

    def options(self) -> list[tuple[str, str | None, str | None]]:
        """Commands that make sense here (opening what is open included: a random agent tries it)."""
        here = self.location
        commands: list[tuple[str, str | None, str | None]] = [("go", r, None) for r in self.contents if r != here]
        commands += [("look", None, None), ("inventory", None, None)]
        if here in OPENABLE:
            commands += [("open", here, None), ("close", here, None)]
        commands += [("take", o, here) for o in sorted(self.visible() - {here})]
        commands += [("put", o, here) for o in sorted(self.holding)]
        return commands + [("examine", o, None) for o in sorted(self.visible())]

    def step(self, verb: str, obj: str | None = None, recep: str | None = None) -> str:
        here = self.location
        if verb == "go" and obj in self.contents and obj != here:
            self.location = obj
            return f"You arrive at {obj}."
        if verb == "open" and obj == here and obj in OPENABLE and obj not in self.opened:
            self.opened.add(obj)
            return f"You open the {obj}."
        if verb == "close" and obj == here and obj in self.opened:
            self.opened.discard(obj)
            return f"You close the {obj}."
        if verb == "take" and not self.holding and recep == here and obj in self.visible() - {here}:
            self.contents[here].discard(obj)
            self.holding.add(obj)
            return f"You pick up the {obj} from the {here}."
        if verb == "put" and obj in self.holding and recep == here and here in self.visible():
            self.holding.discard(obj)
            self.contents[here].add(obj)
            return f"You put the {obj} in/on the {here}."
        if verb == "examine" and obj in self.visible():
            return f"This is a normal {obj}."
        if verb == "look":
            return f"You are facing the {here}."
        if verb == "inventory":
            return f"You are carrying: {', '.join(sorted(self.holding)) or 'nothing'}."
        return NOTHING


def _world(rng: random.Random) -> tuple[Household, str, str]:
    receptacles = ["countertop", "cabinet", "drawer", "fridge", "sinkbasin", "microwave", "shelf"]
    objects = ["mug", "apple", "knife", "bowl", "plate", "spoon", "egg", "tomato"]
    contents: dict[str, set[str]] = {r: set() for r in receptacles}
    for obj in objects:
        contents[rng.choice(receptacles)].add(obj)
    target = rng.choice(objects)
    dest = rng.choice([r for r in receptacles if target not in contents[r]])
    return Household(contents), target, dest


def _gold_plan(world: Household, target: str, dest: str) -> list[tuple[str, str | None, str | None]]:
    source = next(r for r, objects in world.contents.items() if target in objects)
    plan: list[tuple[str, str | None, str | None]] = [("go", source, None)]
    if source in OPENABLE:
        plan.append(("open", source, None))
    plan += [("take", target, source), ("go", dest, None)]
    if dest in OPENABLE:
        plan.append(("open", dest, None))
    return [*plan, ("put", target, dest)]


def _episode(name: str, seed: int, policy: str) -> dict[str, Any]:
    rng = random.Random(seed)
    world, target, dest = _world(rng)
    instruction = f"put {'an' if target[0] in 'aeiou' else 'a'} {target} in the {dest}"
    plan = _gold_plan(world, target, dest)
    states, actions = [world.state("You are in the middle of a room.")], []
    names = sorted({*world.contents, *(o for objects in world.contents.values() for o in objects)})
    for t in range(len(plan) if policy == "gold" else 30):
        if policy == "gold":
            verb, obj, recep = plan[t]
        elif rng.random() < 0.6:  # something one could do here, as a random agent over admissible commands picks
            verb, obj, recep = rng.choice(world.options())
        else:
            verb, obj, recep = rng.choice(VERBS), rng.choice(names), rng.choice(names)
        if policy == "random" and rng.random() < 0.1:  # a command the game cannot parse
            actions.append({"parsed": False})
            states.append(world.state(NOTHING))
            continue
        feedback = world.step(verb, obj, recep)
        action: dict[str, Any] = {"verb": verb, "parsed": True}
        if obj is not None:
            action["obj"] = obj
        if recep is not None and verb in ("take", "put"):
            action["recep"] = recep
        actions.append(action)
        states.append(world.state(feedback))
    won = target in world.contents[dest]
    return {"episode": name, "task": f"house{seed}", "instruction": instruction, "states": states, "actions": actions,
            "env_reward": float(won), "success": won}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory):
    gold = [_episode(f"gold{seed}", seed, "gold") for seed in range(30)]
    others = [_episode(f"random{seed}", seed, "random") for seed in range(100, 160)]
    path = tmp_path_factory.mktemp("household") / "episodes.jsonl"
    write_records(gold + others, path)
    scorer = RubricScorer.from_file(shipped_examples() / "household.rubric", backend="interp")
    return scorer, scorer.score(path), gold, others


def test_gold_is_never_punished_and_random_play_is(played):
    scorer, result, gold, others = played
    assert all(episode["success"] for episode in gold) and not all(episode["success"] for episode in others)
    fired = assert_invalidity_profile(scorer, result, [e["episode"] for e in gold], [e["episode"] for e in others])
    assert all(fired[name].keys() >= {"gold0", "gold1"} for name in ("takes_target", "places"))
