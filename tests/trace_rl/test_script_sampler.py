"""The script sampler: through the rollout engine, a script's turns become exactly the tokens a rollout records, in
both action modes; a turn no rollout could have produced is refused, naming it."""

from __future__ import annotations

from typing import Any

import pytest
from tracec.trace_rl.envs.protocol import Environment, Observation, StepResult
from tracec.trace_rl.policy.tiny import build_tokenizer
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.script_sampler import ScriptError, ScriptSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate, choice_text


class DoorEnv(Environment):
    """Won by `open door` then `go north`; lists its admissible commands."""

    system_prompt = "Leave the room."

    def reset(self, seed: int) -> Observation:
        self.texts: list[str] = []
        return Observation(text=f"Room {seed}. A door is to the north.", role="user")

    @property
    def admissible_commands(self) -> list[str]:
        return ["look", "open door", "go north"]

    def step(self, action: str) -> StepResult:
        self.texts.append(action)
        won = self.texts[-2:] == [choice_text("open door"), choice_text("go north")]
        return StepResult(observation=Observation(text=f"You did {len(self.texts)} things.", role="user"),
                          done=won or len(self.texts) >= 4, reward=float(won), state={}, action={"text": action})

    def trajectory(self, episode: str) -> dict[str, Any]:
        won = self.texts[-2:] == [choice_text("open door"), choice_text("go north")]
        return {"episode": episode, "task": "door", "states": [], "actions": [], "env_reward": float(won),
                "success": won}


PLAN = ["open door", "go north"]


def _engine(script: Any, **section: Any) -> tuple[RolloutEngine, TurnTemplate]:
    template = TurnTemplate(build_tokenizer())
    engine = RolloutEngine(ScriptSampler(template, script), template, DoorEnv, RolloutSection(**section), max_turns=4)
    return engine, template


@pytest.mark.parametrize("mode", ["admissible", "generate"])
def test_a_scripted_episode_holds_the_scripted_turns_as_a_rollout_does(mode: str) -> None:
    engine, template = _engine(lambda key, turn: choice_text(PLAN[turn]), action_mode=mode)
    episodes = engine.run([GroupTask(group=0, seed=3), GroupTask(group=1, seed=4)], group_size=1, seed=0,
                          iteration=0)
    for episode in episodes:
        assert episode.success and episode.turns == 2
        turns = [template.closed_turn_ids(choice_text(command)) for command in PLAN]
        assert episode.token_ids[episode.sampled].tolist() == turns[0] + turns[1]
        assert [turn.chosen for turn in episode.choice_turns] == ([1, 2] if mode == "admissible" else [])
        # The action mask: each turn's `<action>...</action>`, not its end-of-turn token
        assert template.tokenizer.decode(episode.token_ids[episode.loss_mask].tolist()) == \
            "".join(choice_text(command) for command in PLAN)


def test_a_turn_no_rollout_could_have_produced_is_refused() -> None:
    engine, _ = _engine(lambda key, turn: choice_text("jump"), action_mode="admissible")
    with pytest.raises(ScriptError, match=r"episode 0, turn 1: the scripted turn '<action>jump</action>' is none of "
                                          "the 3 commands offered"):
        engine.run([GroupTask(group=0, seed=3)], group_size=1, seed=0, iteration=0)
    engine, _ = _engine(lambda key, turn: "a \\ b")  # the tiny tokenizer has no backslash
    with pytest.raises(ScriptError, match="does not give the scripted turn back as written"):
        engine.run([GroupTask(group=0, seed=3)], group_size=1, seed=0, iteration=0)
    engine, _ = _engine(lambda key, turn: choice_text(PLAN[turn]), max_new_tokens=8)
    with pytest.raises(ScriptError, match=r"takes 27 tokens, more than a rollout may write \(rollout.max_new_tokens "
                                          "= 8"):
        engine.run([GroupTask(group=0, seed=3)], group_size=1, seed=0, iteration=0)
