"""Credit assignment: the advantage of every loss token of a batch of episodes, from GRPO or from a TRCA rubric.

- `grpo`: the episode's reward (the environment's `env_reward`) minus its group's mean, divided by the group's
  population standard deviation (`scale = "std"`; + 1e-6) or not (`scale = "none"`, Dr. GRPO); every action token
  of the episode gets it.
- `trca`: the compiled rubric scores each episode's trajectory record (`RubricScorer.evaluate`); each step t has its
  own advantage A_t = A_E + A_S (`docs/language.md`, rewards), and it reaches only the action tokens of turn t.
  The rubric's task groups are the rollout groups (each episode's `task` is set to its group), so A_E compares the
  K episodes of one task instance exactly as GRPO would. `lam` / `gamma` / `step_scale` override the rubric's when
  given.
- `oracle`: +1 on a step that played the next command of the environment's shortest winning plan from its state,
  -1 on any other (the trajectory's `on_plan`, which the TextWorld family records), then standardized over all the
  steps of the group as GRPO standardizes rewards: uncentred, the -1 of the many off-plan steps push every chosen
  command down, which raises the likeliest other command most, and the policy collapsed onto one (measured: entropy
  1.8 -> 0.2 in five iterations, held-out success 2% -> 0). Not a method: the learnability gate's reference, credit
  that knows the answer. Its expected gradient at a state is that of pi(c*|s), the plan command's probability, which
  vanishes where the policy rarely plays c*. `oracle = "imitation"` weighs an on-plan step by 1 / pi_old(c*|s) (0
  elsewhere) before the same standardization: its expected gradient is that of log pi(c*|s), behaviour cloning's on
  the states the policy visits (on-policy imitation, DAgger's target). It needs the admissible mode, whose turns
  keep the chosen command's log pi_old.
A group whose loss tokens all have |A| <= 1e-9 is constant: it teaches nothing, and the trainer may drop it.
Left out: batch-level reward scaling, reward clipping, per-token (rather than per-step) credit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tracec.runtime.evaluate import RubricScorer
from tracec.runtime.trajectories.jsonl import Episode
from tracec.trace_rl.rollouts.engine import EpisodeRollout

from tracec.config_io import ConfigError

EPS = 1e-6
CONSTANT = 1e-9


def grpo_advantages(rewards: np.ndarray, groups: np.ndarray, *, scale: str) -> np.ndarray:
    """(n,) episode advantages from (n,) rewards and (n,) group ids."""
    advantages = np.zeros(len(rewards))
    for group in np.unique(groups):
        members = groups == group
        centred = rewards[members] - rewards[members].mean()
        advantages[members] = centred / (rewards[members].std() + EPS) if scale == "std" else centred
    return advantages


def check_rubric_fits(scorer: RubricScorer, state: dict[str, object], *, rubric: str) -> None:
    """Refuse a rubric whose schema names none of the fields the environment's states have: every fact would be
    unknown, every operator silent and every advantage 0, a run that trains on nothing without a word: a config
    error, said before the first rollout."""
    declared = set(scorer.compiled.schema.state)
    if declared and not declared & set(state):
        raise ConfigError(f"advantage.rubric = {rubric!r}: its schema {scorer.compiled.schema.name!r} reads the state "
                         f"fields {', '.join(sorted(declared))}, and the environment's states have none of them "
                         f"(they have {', '.join(sorted(state)) or 'no fields'}); use the rubric written for this "
                         "environment")


def trca_step_advantages(scorer: RubricScorer, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
    """Per episode, its steps' A = A_E + A_S: (turns,) each."""
    records = [_as_episode(e) for e in episodes]
    result = scorer.evaluate(records)
    offsets = result.batch.episode_offsets
    return [np.array(result.rewards.A[offsets[i]:offsets[i + 1]], dtype=np.float64) for i in range(len(episodes))]


def _as_episode(rollout: EpisodeRollout) -> Episode:
    record = rollout.trajectory
    return Episode(episode=rollout.episode, task=f"group{rollout.group}",
                   instruction=str(record.get("instruction", "")),
                   states=list(record["states"]), actions=list(record["actions"]),
                   env_reward=float(record.get("env_reward", 0.0)), success=record.get("success"))


def token_advantages(episode: EpisodeRollout, step_advantages: np.ndarray) -> np.ndarray:
    """(T,) float32: each loss token gets its step's advantage, context tokens 0."""
    steps = episode.step_of_token
    if len(step_advantages) < episode.turns:
        raise ValueError(f"episode {episode.episode}: {episode.turns} turns but {len(step_advantages)} scored steps; "
                         "the environment must record one action per agent turn")
    out = np.zeros(len(steps), dtype=np.float32)
    loss = steps >= 0
    out[loss] = step_advantages[steps[loss]]
    return out


def episode_token_advantages(episodes: Sequence[EpisodeRollout], *, kind: str, scale: str = "std",
                             scorer: RubricScorer | None = None, oracle: str = "signed") -> list[np.ndarray]:
    """The (T,) advantages of every episode: GRPO's per episode, or TRCA's per step."""
    if kind == "grpo":
        rewards = np.array([e.reward for e in episodes], dtype=np.float64)
        groups = np.array([e.group for e in episodes])
        per_episode = grpo_advantages(rewards, groups, scale=scale)
        return [token_advantages(e, np.full(max(e.turns, 1), a)) for e, a in zip(episodes, per_episode)]
    if kind == "oracle":
        return [token_advantages(e, a) for e, a in zip(episodes, oracle_advantages(episodes, weight=oracle))]
    if kind == "trca":
        if scorer is None:
            raise ValueError("TRCA advantages need a scorer (advantage.rubric)")
        return [token_advantages(e, a) for e, a in zip(episodes, trca_step_advantages(scorer, episodes))]
    raise ValueError(f"advantage kind {kind!r}: use 'grpo', 'trca' or 'oracle'")


def oracle_advantages(episodes: Sequence[EpisodeRollout], *, weight: str = "signed") -> list[np.ndarray]:
    """Per episode, (turns,): each step's plan credit, standardized over the steps of its group by GRPO's rule (0 for
    a group whose steps all agree). `signed`: +1 where the step followed the shortest winning plan, -1 elsewhere;
    `imitation`: 1 / pi_old(c|s) where it did, 0 elsewhere."""
    raw = [_plan_credit(episode, weight) for episode in episodes]
    groups = np.concatenate([np.full(len(r), e.group) for r, e in zip(raw, episodes, strict=True)])
    standardized = grpo_advantages(np.concatenate(raw), groups, scale="std")
    return np.split(standardized, np.cumsum([len(r) for r in raw])[:-1])


def _plan_credit(episode: EpisodeRollout, weight: str) -> np.ndarray:
    on_plan = episode.trajectory.get("on_plan")
    if on_plan is None:
        raise ValueError(f"episode {episode.episode}: the oracle credit needs an environment that records "
                         "`on_plan` per step (the TextWorld family does)")
    followed = np.asarray(on_plan, dtype=bool)
    if weight == "signed":
        return np.where(followed, 1.0, -1.0)
    if weight == "imitation":
        if len(episode.choice_turns) != len(followed):
            raise ValueError(f"episode {episode.episode}: the imitation-weighted oracle needs each step's "
                             "log pi_old(c|s), which only the admissible mode keeps (rollout.action_mode)")
        old = np.array([turn.old_logprob for turn in episode.choice_turns])
        return np.where(followed, np.exp(-old), 0.0)
    raise ValueError(f"oracle weight {weight!r}: use 'signed' or 'imitation'")


def constant_groups(episodes: Sequence[EpisodeRollout], advantages: Sequence[np.ndarray]) -> set[int]:
    """The groups whose every loss token has |A| <= 1e-9."""
    informative: set[int] = set()
    for episode, values in zip(episodes, advantages, strict=True):
        if np.any(np.abs(values[episode.loss_mask]) > CONSTANT):
            informative.add(episode.group)
    return {e.group for e in episodes} - informative
