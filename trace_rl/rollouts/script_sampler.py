"""A turn sampler that plays a script: each episode's turns are given texts, entered as the tokens a sampler draws.

Behaviour cloning and supervised fine-tuning learn from episodes a script plays (a TextWorld game's winning plan, a
capability environment's gold calls), yet must learn from exactly the tokens a rollout of the policy holds: the same
prompt, observations, end-of-turn tokens and action mask. So the script is played through the one rollout engine
as its `TurnSampler`: `ScriptSampler(template, script)` gives episode `key` (the engine's: the order of one run's
episodes) at its `n`-th turn the text `script(key, n)`, as the closed turn `TurnTemplate.closed_turn_ids(text)`
(the tokenizer's own tokens of the text, then the end-of-turn token), with log-prob 0 (no model ran). In the
admissible-command mode the text must be the turn of one of the offered commands (`<action>command</action>`), and
that choice is taken. A written turn must decode back to its text (the environment reads the decoded text) and fit
`max_new_tokens` (a rollout could not have drawn it otherwise): else a `ScriptError` names the episode and turn.
Left out: scripts that read the policy (DAgger-style corrections), and any tokenization of a text but its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest, TurnSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate

Script = Callable[[int, int], str]  # (episode key, turns it has taken) -> the text of its next turn


class ScriptError(ValueError):
    """A scripted turn that no rollout could have produced: episode `key`'s turn `turn` (from 1), and why."""

    def __init__(self, key: int, turn: int, problem: str) -> None:
        super().__init__(f"episode {key}, turn {turn}: {problem}")
        self.key, self.turn, self.problem = key, turn, problem


class ScriptSampler(TurnSampler):
    """Plays `script`'s turns; counts each episode's turns itself (a new batch, `reset`, starts them at 0)."""

    decodes_with_training_weights = False  # no model runs
    recomputes_old_logprobs = True  # a scripted turn's log-prob 0 is the script's certainty, not the policy's

    def __init__(self, template: TurnTemplate, script: Script) -> None:
        self.template, self.script = template, script
        self._turns: dict[int, int] = {}

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        return [self._turn(request) for request in requests]

    def _turn(self, request: TurnRequest) -> SampledTurn:
        turn = self._turns.get(request.key, 0)
        self._turns[request.key] = turn + 1
        text = self.script(request.key, turn)
        ids = self.template.closed_turn_ids(text)
        if request.choices:
            offered = [list(choice) for choice in request.choices]
            if ids not in offered:
                raise ScriptError(request.key, turn + 1, f"the scripted turn {text!r} is none of the {len(offered)} "
                                  "commands offered")
            return SampledTurn(ids=ids, logprobs=[0.0] * len(ids), closed=True, choice=offered.index(ids))
        if self.template.turn_text(ids) != text:
            raise ScriptError(request.key, turn + 1, f"the tokenizer does not give the scripted turn back as written "
                              f"({text!r} reads {self.template.turn_text(ids)!r}), so the environment would read "
                              "another turn")
        if len(ids) > request.max_new_tokens:
            raise ScriptError(request.key, turn + 1, f"the scripted turn takes {len(ids)} tokens, more than a "
                              f"rollout may write (rollout.max_new_tokens = {request.max_new_tokens}); raise "
                              "rollout.max_new_tokens")
        return SampledTurn(ids=ids, logprobs=[0.0] * len(ids), closed=True)

    def release(self, keys: Sequence[int]) -> None:
        """Nothing is cached."""

    def reset(self) -> None:
        self._turns.clear()

    def sync(self, policy: Any) -> None:
        """No weights."""
