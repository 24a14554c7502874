"""What a rollout asks of a turn sampler, and what the trainer reads of one: the `TurnSampler` protocol and its types.

The rollout engine (`engine.RolloutEngine`) hands a sampler one `TurnRequest` per live episode and gets one
`SampledTurn` back for each: the exact ids drawn and their log-probabilities under the sampling distribution
(token-in/token-out). Three samplers speak it: the KV-cache sampler over the training model (`kv_sampler`), vLLM
(`vllm_sampler`, GPU) and a script (`script_sampler`: behaviour cloning, SFT). Each says, once, what the trainer must
do about it, so that no loop asks which backend ran:
- `decodes_with_training_weights`: it runs the training model itself, so the trainer merges the adapter into the
  base weights while it samples (`Policy.merged`) and `sync` has nothing to do;
- `recomputes_old_logprobs`: its log-probs are not the training model's (another engine's numerics, or a script's 0,
  the log-prob of a turn that was certain), so the learner recomputes them before the update
  (`Learner.off_policy_correction`) and weighs each sequence by its importance weight against the sampler's.
Left out: asynchronous sampling (a request returns its turn before the next call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch


@dataclass(frozen=True, kw_only=True)
class TurnRequest:
    """One episode's next turn: its key (stable over its turns) and the tokens appended since its last turn."""

    key: int
    new_ids: Sequence[int]  # the prompt at the first turn; then the observation's tokens
    context: Sequence[int]  # every token of the episode so far, new_ids included (for samplers without a cache)
    generator: torch.Generator  # the episode's own random stream
    max_new_tokens: int
    # The admissible-command action mode: each choice's token ids, ending with an end-of-turn token; the turn is
    # one of them, drawn from their scores (nothing is decoded). Empty: the turn is decoded freely.
    choices: Sequence[Sequence[int]] = ()


@dataclass(frozen=True, kw_only=True)
class SampledTurn:
    ids: list[int]  # as drawn; ends with an end-of-turn token when `closed`
    logprobs: list[float]  # of each drawn id under the sampling distribution
    closed: bool  # ended by an end-of-turn token (else by the token limit)
    choice: int | None = None  # the index of the chosen choice (admissible-command mode)
    choice_logprob: float = 0.0  # log pi(choice | context): its log-softmax over the choices' scores


class TurnSampler(Protocol):
    decodes_with_training_weights: ClassVar[bool]  # runs the training model itself (the adapter merged meanwhile)
    recomputes_old_logprobs: ClassVar[bool]  # its log-probs are not the training model's: the learner recomputes

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        """The next turn of each requested episode, all in one batch."""

    def release(self, keys: Sequence[int]) -> None:
        """These episodes have ended."""

    def reset(self) -> None:
        """A new batch of episodes begins."""

    def sync(self, policy: Any) -> None:
        """The policy's weights changed (after an update): a sampler with its own copy of them reloads it."""
