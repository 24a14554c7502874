"""The learnability gate's references: behaviour cloning on the training walkthroughs, and a state-blind verb prior.

Before two credit assignments are compared on a task family, the family must be learnable by the policy at all:
- **behaviour cloning** (`clone_walkthroughs`): the policy plays each training game's shortest winning plan (the
  script sampler `rollouts.script_sampler` picking the plan's next command, through the one rollout engine, so the
  tokens are exactly those of a rollout), then maximises log pi(c*|s) of the plan's commands over the candidates
  (`choice_policy`), Adam on the adapter, full batch, `epochs` passes;
- the **oracle credit** is a training run with `advantage.kind = "oracle"` (`credit`);
- the **verb prior** (`VerbPrior`) picks among the admissible commands by how often the plans chose each verb when
  it was admissible, never looking at the state: what "learning nothing about the state" scores.
Left out: cloning from anything but the walkthroughs (DAgger-style corrections).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment
from tracec.trace_rl.policy.choice_policy import choice_logprobs, choice_score_rule, choice_tree
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.script_sampler import ScriptSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate, choice_text


def walkthrough_episodes(policy: Policy, make_env: Callable[[], FamilyEnvironment], seeds: Sequence[int], *,
                         max_turns: int) -> list[EpisodeRollout]:
    """One episode of each game in `seeds` played by its plan, as the rollout engine records episodes."""
    envs: list[FamilyEnvironment] = []

    def tracked() -> FamilyEnvironment:
        env = make_env()
        envs.append(env)
        return env

    template = TurnTemplate(policy.tokenizer)
    # Keys are the engine's: the order of the run's environments, each one's next command its plan's first.
    sampler = ScriptSampler(template, lambda key, turn: choice_text(envs[key].policy_commands[0]))
    engine = RolloutEngine(sampler, template, tracked, RolloutSection(action_mode="admissible"), max_turns=max_turns)
    return engine.run([GroupTask(group=i, seed=seed) for i, seed in enumerate(seeds)], group_size=1, seed=0,
                      iteration=0)


def clone_walkthroughs(policy: Policy, episodes: Sequence[EpisodeRollout], *, epochs: int, lr: float,
                       batch: int = 32, score: str = "mean", seed: int = 0) -> list[float]:
    """Behaviour cloning: `epochs` shuffled passes of Adam steps, `batch` episodes a step, on -mean log pi(c*|s)
    over the plan's steps; each pass's mean loss."""
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=lr)
    pad = policy.tokenizer.pad_token_id
    rng = np.random.default_rng(seed)
    losses = []
    policy.model.train()
    for _ in range(epochs):
        order = rng.permutation(len(episodes))
        total = 0.0
        for start in range(0, len(order), batch):
            chunk = [episodes[i] for i in order[start:start + batch]]
            tree = choice_tree([e.token_ids.tolist() for e in chunk], [e.choice_turns for e in chunk],
                               row_tokens=2048, pad_id=int(pad if pad is not None else 0))
            loss = -choice_logprobs(policy.model, tree, temperature=1.0, score=choice_score_rule(score)).chosen.mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            total += float(loss.detach()) * len(chunk)
        losses.append(total / len(episodes))
    policy.model.eval()
    return losses


@dataclass(frozen=True)
class VerbPrior:
    """P(verb chosen | verb admissible) over the training plans; a command's weight is its verb's."""

    weights: dict[str, float]

    @classmethod
    def fit(cls, make_env: Callable[[], FamilyEnvironment], seeds: Sequence[int]) -> VerbPrior:
        chosen: Counter[str] = Counter()
        offered: Counter[str] = Counter()
        env = make_env()
        try:
            for seed in seeds:
                env.reset(seed)
                for command in env.policy_commands:
                    offered.update({_verb(c) for c in env.admissible_commands})
                    chosen[_verb(command)] += 1
                    env.step(choice_text(command))
        finally:
            env.close()
        return cls({verb: chosen[verb] / offered[verb] for verb in offered})

    def play(self, make_env: Callable[[], FamilyEnvironment], seeds: Sequence[int], *, episodes: int,
             max_turns: int, seed: int) -> np.ndarray:
        """(len(seeds), episodes) wins of the prior's sampled play on each game."""
        rng = np.random.default_rng(seed)
        wins = np.zeros((len(seeds), episodes))
        env = make_env()
        try:
            for row, game in enumerate(seeds):
                for column in range(episodes):
                    env.reset(game)
                    for _ in range(max_turns):
                        commands = list(env.admissible_commands)
                        weight = np.array([self.weights.get(_verb(c), 0.0) for c in commands]) + 1e-3
                        result = env.step(choice_text(commands[rng.choice(len(commands), p=weight / weight.sum())]))
                        if result.done:
                            break
                    wins[row, column] = float(env.trajectory("prior")["success"])
        finally:
            env.close()
        return wins


def _verb(command: str) -> str:
    return command.split(" ", 1)[0]
