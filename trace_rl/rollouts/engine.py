"""Multi-turn rollouts at the token level: groups of episodes against the one environment protocol, decoded together.

    engine = RolloutEngine(sampler, TurnTemplate(tokenizer), make_env, RolloutSection(), max_turns=8)
    episodes = engine.run([GroupTask(group=0, seed=17), GroupTask(group=1, seed=42)], group_size=16,
                          seed=run_seed, iteration=3)

A group is K episodes of one task instance (K environments reset with the same seed). Every episode of every group
of a call advances in lockstep, one agent turn at a time, through one `TurnSampler` (the KV-cache sampler over the
model's forward, or vLLM): decoding 16 sequences costs about 1.3 times 8 here, so the larger batch is the cheaper
one. Between turns each environment steps on the decoded text of its episode's turn; its observation is tokenized
by the chat template (`TurnTemplate`, given the environment's tools as JSON schemas, `protocol.agent_tools`, in
the native call format) and appended, so an episode is one growing token sequence whose sampled ids
and sampler log-probabilities are kept exactly as drawn. Which sampled tokens carry the turn's advantage
(`loss_tokens`: the action only, or the whole turn) is decided here, once, per turn.

The policy acts in one of two modes (`action_mode`): `generate`, it writes its turn (decoded token by token), or
`admissible`, it chooses one of the environment's admissible commands (`env.admissible_commands`, as TextWorld
lists them): each command, as the closed turn `<action>command</action>` (`TurnTemplate.choice_ids`), is scored
under the policy given the episode so far and one is drawn from the softmax of the scores (`KVCacheSampler`); the
environment then plays the chosen command, and the chosen tokens, with their sampling log-probs, are the turn.
Which of its tokens carry the advantage follows the same rule as a written turn.

Expert guidance (`rollout.hint_ratio = [low, high]`, TRACE's hint injection): per group, round(r * K) members, r
drawn uniformly in [low, high] from the group's own generator (seeded by run seed, iteration and group), see the
environment's optional `hint()` in an `<expert_guidance>` block appended to the system prompt: the hint is the
trainer's instruction, not the user's words, so the user's opening message (which the user and the rubric read)
stays as the task states it (the tools rendered as without it; a capability environment's hint is guidance, never
its solution's calls: `envs/capability/guidance.py`). An environment without a hint leaves those members plain. The
learner must learn to act WITHOUT the hint, so a hinted episode's finished stream has its first prompt replaced by
the plain one (the prompt carries no loss; the sampled turns and observations are kept as drawn) and is marked
`hinted`: its sampler log-probs were drawn under the hinted context, so the trainer recomputes them (`grpo.train`).

Each episode draws from its own generator, seeded by (run seed, iteration, group, member): the same call gives the
same episodes whatever else shares the batch, so a resumed run and a run split across ranks sample alike.
An episode ends when its environment says done, after `max_turns` turns, or (truncated) when its next turn would
not fit `max_context_tokens`. Left out: asynchronous environments and episodes that continue past the context
(a sliding window would break the one-sequence property).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tracec.trace_rl.envs.protocol import Environment, EnvironmentFactory, agent_tools
from tracec.trace_rl.policy.choice_policy import ChoiceTurn
from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest, TurnSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate, choice_text

from tracec.config_io import ConfigError


@dataclass(frozen=True, kw_only=True)
class GroupTask:
    group: int  # the group's number in its iteration (unique there: it seeds the group's episodes)
    seed: int  # the task instance: the environment seed every member resets with


@dataclass(frozen=True, kw_only=True)
class EpisodeRollout:
    """One finished episode: its token stream and, aligned with it, what the sampler and the trainer need."""

    group: int
    member: int
    seed: int
    episode: str  # a unique id: g{group}.{member}
    token_ids: np.ndarray  # (T,) int64: the prompt, then per turn the sampled ids and the observation's ids
    sampler_logprobs: np.ndarray  # (T,) float32: the sampler's log-prob of each sampled token, 0 elsewhere
    step_of_token: np.ndarray  # (T,) int32: the turn whose advantage a loss token carries, -1 for context
    sampled: np.ndarray  # (T,) bool: drawn by the policy (all of each turn, loss or not)
    trajectory: dict[str, Any]  # the environment's record of the episode (trajectory JSONL)
    reward: float  # the environment's reward of the episode (its `env_reward`)
    success: bool
    truncated: bool  # ended because the context was full
    turns: int
    choice_turns: tuple[ChoiceTurn, ...] = ()  # admissible mode: each turn's candidates, choice and its odds
    hinted: bool = False  # sampled with expert guidance; `token_ids` hold the plain prompt, `sampler_logprobs` the
    #   sampler's under the hinted one

    @property
    def loss_mask(self) -> np.ndarray:
        return self.step_of_token >= 0


@dataclass
class _Live:
    """An episode in flight."""

    key: int
    group: GroupTask
    member: int
    env: Environment
    generator: torch.Generator
    ids: list[int]
    new_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    turns: int = 0
    truncated: bool = False
    choices: list[str] = field(default_factory=list)  # admissible mode: the commands the next turn chooses from
    choice_ids: list[list[int]] = field(default_factory=list)
    choice_turns: list[ChoiceTurn] = field(default_factory=list)
    plain_prompt: list[int] | None = None  # hinted: the first prompt without the guidance, what the learner sees
    prompt_length: int = 0  # tokens of the first prompt as sampled
    tools: list[dict[str, Any]] = field(default_factory=list)  # the JSON schemas the agent is given (native format)


def episode_generator(seed: int, iteration: int, group: int, member: int) -> torch.Generator:
    """The random stream of one episode: a pure function of where it stands in the run."""
    state = np.random.SeedSequence([seed, iteration, group, member]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


HINT_STREAM = 0x68696E74  # tags the group's hint draw apart from its members' streams


def hinted_members(seed: int, iteration: int, group: int, group_size: int,
                   ratio: Sequence[float]) -> frozenset[int]:
    """The members of a group shown the hint: round(r * K) of them, r uniform in `ratio`; a pure function of where
    the group stands in the run."""
    low, high = float(ratio[0]), float(ratio[1])
    if high <= 0:
        return frozenset()
    rng = np.random.default_rng(np.random.SeedSequence([seed, iteration, group, HINT_STREAM]))
    count = min(group_size, round(rng.uniform(low, high) * group_size))
    return frozenset(int(m) for m in rng.permutation(group_size)[:count])


def guided_system_prompt(system_prompt: str, hint: str) -> str:
    """The system prompt with the hint appended as an `<expert_guidance>` block."""
    block = f"<expert_guidance>\n{hint}\n</expert_guidance>"
    return f"{system_prompt}\n\n{block}" if system_prompt else block


class RolloutEngine:
    def __init__(self, sampler: TurnSampler, template: TurnTemplate, make_env: EnvironmentFactory,
                 settings: RolloutSection, *, max_turns: int) -> None:
        self.sampler, self.template, self.make_env, self.settings = sampler, template, make_env, settings
        self.max_turns = max_turns  # an episode's turn limit is the environment's setting (`env.max_turns`)
        # The modes, resolved once: whether a turn is a choice among commands, and which of its tokens carry loss.
        self.chooses = settings.action_mode == "admissible"
        self.loss_span = _whole_turn if settings.loss_tokens == "turn" else template.action_token_range

    def run(self, tasks: Sequence[GroupTask], *, group_size: int, seed: int, iteration: int) -> list[EpisodeRollout]:
        """K = `group_size` episodes of each task, in task order then member order."""
        hints = {task.group: hinted_members(seed, iteration, task.group, group_size, self.settings.hint_ratio)
                 for task in tasks}
        live = [self._start(key, task, member, seed, iteration, hinted=member in hints[task.group])
                for key, (task, member) in enumerate((t, m) for t in tasks for m in range(group_size))]
        finished: dict[int, EpisodeRollout] = {}
        self.sampler.reset()
        try:
            while live:
                live = self._turn(live, finished)
        finally:
            self.sampler.reset()
        return [finished[key] for key in sorted(finished)]

    def opening_state(self, seed: int) -> dict[str, Any]:
        """The opening state of task `seed`, whose first prompt must leave room for a turn (else a ConfigError): what
        a trainer checks before its first rollout."""
        episode = self._start(0, GroupTask(group=0, seed=seed), 0, 0, 0)
        try:
            states = episode.env.trajectory("probe").get("states") or [{}]
        finally:
            episode.env.close()
        return dict(states[0])

    def _start(self, key: int, task: GroupTask, member: int, seed: int, iteration: int, *,
               hinted: bool = False) -> _Live:
        env = self.make_env()
        first = env.reset(task.seed)
        tools = agent_tools(env)
        prompt = self.template.prompt_ids(env.system_prompt, first, tools=tools)
        plain: list[int] | None = None
        hint = env.hint() if hinted else None
        if hint:
            plain, prompt = prompt, self.template.prompt_ids(guided_system_prompt(env.system_prompt, hint), first,
                                                             tools=tools)
        episode = _Live(key=key, group=task, member=member, env=env, tools=tools,
                        generator=episode_generator(seed, iteration, task.group, member), ids=list(prompt),
                        new_ids=list(prompt), logprobs=[0.0] * len(prompt), steps=[-1] * len(prompt),
                        sampled=[False] * len(prompt), plain_prompt=plain,
                        prompt_length=len(prompt))
        self._offer_choices(episode)
        if len(prompt) + self._room(episode) > self.settings.max_context_tokens:
            env.close()
            raise ConfigError(f"the first prompt of task seed {task.seed} has {len(prompt)} tokens, which leaves no "
                             f"room for a turn of {self._room(episode)} in rollout.max_context_tokens = "
                             f"{self.settings.max_context_tokens}; raise rollout.max_context_tokens")
        return episode

    def _offer_choices(self, episode: _Live) -> None:
        """Admissible mode: the commands the environment admits now, and their tokens as closed turns."""
        if not self.chooses:
            return
        commands = episode.env.admissible_commands
        if commands is None:
            raise TypeError(f"rollout.action_mode = \"admissible\" needs an environment that lists its admissible "
                            f"commands (`admissible_commands`); {type(episode.env).__name__} does not; use "
                            "rollout.action_mode = \"generate\"")
        if not commands:
            raise ValueError(f"task seed {episode.group.seed}: the environment admits no command after "
                             f"{episode.turns} turns, so the policy has nothing to choose from")
        episode.choices = list(commands)
        episode.choice_ids = [self.template.choice_ids(command) for command in commands]

    def _room(self, episode: _Live) -> int:
        """Tokens the next turn may take."""
        if self.chooses:
            return max(len(ids) for ids in episode.choice_ids)
        return self.settings.max_new_tokens

    def _turn(self, live: list[_Live], finished: dict[int, EpisodeRollout]) -> list[_Live]:
        """One agent turn of every live episode; returns those still going."""
        requests = [TurnRequest(key=e.key, new_ids=e.new_ids, context=e.ids, generator=e.generator,
                                max_new_tokens=self.settings.max_new_tokens, choices=e.choice_ids) for e in live]
        turns = self.sampler.sample(requests)
        going: list[_Live] = []
        for episode, turn in zip(live, turns, strict=True):
            done = self._record_turn(episode, turn)
            if done:
                finished[episode.key] = self._finish(episode)
            else:
                going.append(episode)
        ended = [e.key for e in live if e.key in finished]
        if ended and going:
            self.sampler.release(ended)
        return going

    def _record_turn(self, episode: _Live, turn: SampledTurn) -> bool:
        """Append the turn and step the environment on it; True when the episode is over."""
        step = episode.turns
        first, stop = self.loss_span(turn.ids)
        if turn.choice is not None:
            choices = tuple(map(tuple, episode.choice_ids))
            episode.choice_turns.append(ChoiceTurn(start=len(episode.ids), choices=choices, chosen=turn.choice,
                                                   old_logprob=turn.choice_logprob))
        episode.ids.extend(turn.ids)
        episode.logprobs.extend(turn.logprobs)
        episode.steps.extend(step if first <= i < stop else -1 for i in range(len(turn.ids)))
        episode.sampled.extend([True] * len(turn.ids))
        episode.turns += 1
        text = self.template.turn_text(turn.ids) if turn.choice is None else choice_text(episode.choices[turn.choice])
        result = episode.env.step(text)
        if result.done or episode.turns >= self.max_turns:
            return True
        self._offer_choices(episode)
        observation = self.template.observation_ids(result.observation, closed=turn.closed, tools=episode.tools)
        if len(episode.ids) + len(observation) + self._room(episode) > self.settings.max_context_tokens:
            episode.truncated = True
            return True
        episode.new_ids = observation
        episode.ids.extend(observation)
        episode.logprobs.extend([0.0] * len(observation))
        episode.steps.extend([-1] * len(observation))
        episode.sampled.extend([False] * len(observation))
        return False

    def _finish(self, episode: _Live) -> EpisodeRollout:
        name = f"g{episode.group.group}.{episode.member}"
        record = episode.env.trajectory(name)
        episode.env.close()
        if episode.plain_prompt is not None:  # the learner sees the plain prompt; the prompt carries no loss
            cut, plain = episode.prompt_length, episode.plain_prompt
            episode.ids = plain + episode.ids[cut:]
            episode.logprobs = [0.0] * len(plain) + episode.logprobs[cut:]
            episode.steps = [-1] * len(plain) + episode.steps[cut:]
            episode.sampled = [False] * len(plain) + episode.sampled[cut:]
        return EpisodeRollout(
            group=episode.group.group, member=episode.member, seed=episode.group.seed, episode=name,
            token_ids=np.asarray(episode.ids, dtype=np.int64),
            sampler_logprobs=np.asarray(episode.logprobs, dtype=np.float32),
            step_of_token=np.asarray(episode.steps, dtype=np.int32), sampled=np.asarray(episode.sampled, dtype=bool),
            trajectory=record, reward=float(record.get("env_reward", 0.0)), success=bool(record.get("success")),
            truncated=episode.truncated, turns=episode.turns, choice_turns=tuple(episode.choice_turns),
            hinted=episode.plain_prompt is not None,
        )


def _whole_turn(ids: Sequence[int]) -> tuple[int, int]:
    """`loss_tokens = "turn"`: every sampled token of the turn carries its advantage."""
    return 0, len(ids)
