"""Credit assignment: the advantage of every loss token of a batch of episodes, one callable per kind of credit.

A credit is a `Credit`: episodes in, per episode its (T,) token advantages out. `credit_for(config.advantage, ...)`
builds the run's once, at set-up (the only place that reads `advantage.kind`); a new kind is one more callable
and one line there. The kinds:

- `grpo`: the episode's reward (the environment's `env_reward`) minus its group's mean, divided by the group's
  population standard deviation (`scale = "std"`; + 1e-6) or not (`scale = "none"`, Dr. GRPO); every action token
  of the episode gets it.
- `trca`: the compiled rubric scores each episode's trajectory record (`RubricScorer.score`); each step t has its
  own advantage A_t = A_E + A_S (`docs/language.md`, rewards), and it reaches only the action tokens of turn t.
  The rubric's task groups are the rollout groups (each episode's `task` is set to its group), so A_E compares the
  K episodes of one task instance exactly as GRPO would. `lam` / `gamma` / `step_scale` override the rubric's when
  given.
- `gigpo` (GiGPO, Feng et al. 2025): A_E, the group-standardized episode return, plus `step_weight` times A_S, each
  step's discounted environment return standardized among the steps of its group that left the same state (anchor
  states, keyed by the state's facts: `grpo/gigpo.py`); `gamma` is the returns' discount (0.95 by default, the
  paper's).
- `shaped`: GRPO on the rubric's episode return G_0 (the rubric's step rewards and the environment's, discounted as
  TRCA's returns are) with no step term: every action token of the episode gets the one advantage (`grpo/shaped.py`);
  it separates TRCA's per-step credit from the shaping its rubric gives.
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
Each credit gives a step's advantage to the loss tokens of its turn (`token_advantages`): what a turn's loss units
are (its tokens, or its one command) is the learner's business (`loss_units`).
A group whose loss tokens all have |A| <= 1e-9 is constant: it teaches nothing, and the trainer may drop it.
Left out: batch-level reward scaling, reward clipping, per-token (rather than per-step) credit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.grpo.config import RUBRIC_CREDITS, AdvantageSection
from tracec.trace_rl.grpo.gigpo import GIGPO_GAMMA, environment_steps, gigpo_step_advantages
from tracec.trace_rl.grpo.shaped import shaped_step_advantages
from tracec.trace_rl.grpo.standardize import standardize_in_groups
from tracec.trace_rl.rollouts.engine import EpisodeRollout

from tracec.config_io import ConfigError

CONSTANT = 1e-9


class Credit(Protocol):
    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        """Per episode, (T,) float32: each loss token's advantage, 0 on context tokens."""


def credit_for(advantage: AdvantageSection, opening_state: dict[str, object]) -> Credit:
    """The run's credit, as `[advantage]` names it; a rubric is refused here, before any rollout, when it reads
    none of the fields of the environment's `opening_state` (`check_rubric_fits`)."""
    divide_by_std = advantage.scale == "std"
    if advantage.kind in RUBRIC_CREDITS:
        # An empty rubric_name (the config's unset one) is the file's only rubric.
        scorer = RubricScorer.from_file(advantage.rubric, advantage.rubric_name or None, "numba", lam=advantage.lam,
                                        gamma=advantage.gamma, step_scale=advantage.step_scale)
        check_rubric_fits(scorer, opening_state, rubric=advantage.rubric)
        return TRCACredit(scorer) if advantage.kind == "trca" else ShapedCredit(scorer, divide_by_std)
    if advantage.kind == "gigpo":
        gamma = GIGPO_GAMMA if advantage.gamma is None else advantage.gamma
        return GiGPOCredit(gamma, advantage.step_weight, divide_by_std)
    if advantage.kind == "oracle":
        return OracleCredit(PLAN_CREDITS[advantage.oracle])
    return GRPOCredit(divide_by_std)


@dataclass(frozen=True)
class GRPOCredit:
    """The episode's group-normalised reward on every action token of the episode."""

    divide_by_std: bool = True  # advantage.scale: std (True) | none (False: Dr. GRPO)

    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        rewards = np.array([e.reward for e in episodes], dtype=np.float64)
        groups = np.array([e.group for e in episodes])
        per_episode = standardize_in_groups(rewards, groups, divide_by_std=self.divide_by_std)
        return [token_advantages(e, np.full(max(e.turns, 1), a)) for e, a in zip(episodes, per_episode)]


@dataclass(frozen=True)
class TRCACredit:
    """Each step's A = A_E + A_S from the compiled rubric on the action tokens of its turn."""

    scorer: RubricScorer

    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        return [token_advantages(e, a) for e, a in zip(episodes, trca_step_advantages(self.scorer, episodes))]


@dataclass(frozen=True)
class GiGPOCredit:
    """GiGPO's A_E + step_weight * A_S over anchor states (`gigpo_step_advantages`) on each turn's action tokens."""

    gamma: float
    step_weight: float
    divide_by_std: bool

    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        steps = [environment_steps(e) for e in episodes]
        per_step = gigpo_step_advantages(np.array([e.group for e in episodes]), [r for r, _ in steps],
                                         [a for _, a in steps], gamma=self.gamma, step_weight=self.step_weight,
                                         divide_by_std=self.divide_by_std)
        return [token_advantages(e, a) for e, a in zip(episodes, per_step)]


@dataclass(frozen=True)
class ShapedCredit:
    """The standardized rubric return G_0 of each episode on every action token of it (`shaped_step_advantages`)."""

    scorer: RubricScorer
    divide_by_std: bool

    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        per_step = shaped_step_advantages(self.scorer.score([_as_episode(e) for e in episodes]),
                                          divide_by_std=self.divide_by_std)
        return [token_advantages(e, np.full(max(e.turns, 1), a[0] if len(a) else 0.0))
                for e, a in zip(episodes, per_step)]


@dataclass(frozen=True)
class OracleCredit:
    """Each step's standardized plan credit (`oracle_advantages`) on the action tokens of its turn."""

    plan_credit: Callable[[EpisodeRollout], np.ndarray]  # signed_plan_credit | imitation_plan_credit

    def __call__(self, episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        return [token_advantages(e, a) for e, a in zip(episodes, oracle_advantages(episodes, self.plan_credit))]


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
    result = scorer.score(records)
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


def oracle_advantages(episodes: Sequence[EpisodeRollout],
                      plan_credit: Callable[[EpisodeRollout], np.ndarray]) -> list[np.ndarray]:
    """Per episode, (turns,): each step's plan credit, standardized over the steps of its group by GRPO's rule (0 for
    a group whose steps all agree)."""
    raw = [plan_credit(episode) for episode in episodes]
    groups = np.concatenate([np.full(len(r), e.group) for r, e in zip(raw, episodes, strict=True)])
    standardized = standardize_in_groups(np.concatenate(raw), groups, divide_by_std=True)
    return np.split(standardized, np.cumsum([len(r) for r in raw])[:-1])


def signed_plan_credit(episode: EpisodeRollout) -> np.ndarray:
    """(turns,): +1 where the step followed the shortest winning plan, -1 elsewhere."""
    return np.where(_on_plan(episode), 1.0, -1.0)


def imitation_plan_credit(episode: EpisodeRollout) -> np.ndarray:
    """(turns,): 1 / pi_old(c|s) where the step followed the plan, 0 elsewhere."""
    followed = _on_plan(episode)
    if len(episode.choice_turns) != len(followed):
        raise ValueError(f"episode {episode.episode}: the imitation-weighted oracle needs each step's "
                         "log pi_old(c|s), which only the admissible mode keeps (rollout.action_mode)")
    old = np.array([turn.old_logprob for turn in episode.choice_turns])
    return np.where(followed, np.exp(-old), 0.0)


PLAN_CREDITS = {"signed": signed_plan_credit, "imitation": imitation_plan_credit}  # by `advantage.oracle`


def _on_plan(episode: EpisodeRollout) -> np.ndarray:
    on_plan = episode.trajectory.get("on_plan")
    if on_plan is None:
        raise ValueError(f"episode {episode.episode}: the oracle credit needs an environment that records "
                         "`on_plan` per step (the TextWorld family does)")
    return np.asarray(on_plan, dtype=bool)


def constant_groups(episodes: Sequence[EpisodeRollout], advantages: Sequence[np.ndarray]) -> set[int]:
    """The groups whose every loss token has |A| <= 1e-9."""
    informative: set[int] = set()
    for episode, values in zip(episodes, advantages, strict=True):
        if np.any(np.abs(values[episode.loss_mask]) > CONSTANT):
            informative.add(episode.group)
    return {e.group for e in episodes} - informative
