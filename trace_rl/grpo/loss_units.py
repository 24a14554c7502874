"""The loss's units, one class per level: what one term of the clipped surrogate is, and how the learner scores it.

- `TokenUnits` (the token level): a loss token of an action, with its log-prob from the packed forward
  (`logprobs.sequence_logprobs`: no padding, only the loss positions reach the LM head) and, on the first epoch,
  its entropy for the metrics; its old log-prob and advantage are the sequence's at that token.
- `CommandUnits` (the command level, the admissible mode): a turn, with log pi(c|s) re-scored over the tree of the
  turn's candidate commands (`choice_policy`), the old value the sampler drew it with, its step's advantage, and
  the entropy of pi(.|s), which also carries the entropy bonus.
`loss_units_for(config)` resolves `loss.level` (its `auto` as `TrainConfig.loss_level` says) once, at set-up; the
learner and the batch's bookkeeping (`size`: forward length and unit count) then ask the units, never the level.
Left out: units finer than a token (none) or coarser than a turn (GSPO's sequence).
"""

from __future__ import annotations

import numpy as np
import torch
from tracec.trace_rl.grpo.config import TrainConfig
from tracec.trace_rl.grpo.learner import Learner, LearnSequence, LossUnits, ScoredUnits, row_width
from tracec.trace_rl.policy.choice_policy import choice_tree, tree_length
from tracec.trace_rl.rollouts.engine import EpisodeRollout


def loss_units_for(config: TrainConfig) -> LossUnits:
    """The run's loss units: a chosen command at the command level, else a token."""
    return CommandUnits() if config.loss_level == "command" else TokenUnits()


class TokenUnits:
    def size(self, episode: EpisodeRollout) -> tuple[int, int]:
        """Its tokens and its loss tokens."""
        return len(episode.token_ids), int(episode.loss_mask.sum())

    def score(self, sequences: list[LearnSequence], learner: Learner, with_entropy: bool) -> ScoredUnits:
        """Each loss token's log-prob, old log-prob and advantage (and, `with_entropy`, its entropy)."""
        batch = learner.pack(sequences)
        logprobs, entropy = learner.forward(batch, with_entropy)
        logp = torch.cat(logprobs)
        device = logp.device
        old = torch.from_numpy(np.concatenate([s.old_logprobs[s.loss_mask] for s in sequences])).to(device)
        advantages = torch.from_numpy(np.concatenate([s.advantages[s.loss_mask] for s in sequences])).to(device)
        reference = learner.reference(batch)
        token_entropy = torch.cat(entropy) if entropy is not None else None
        spread = (float(token_entropy.sum()), float(len(token_entropy))) if token_entropy is not None else (0.0, 0.0)
        return ScoredUnits(logp=logp, old=old, advantages=advantages,
                           counts=[int(s.loss_mask.sum()) for s in sequences],
                           ref=torch.cat(reference[0]) if reference is not None else None, entropy=None,
                           entropy_sum=spread)


class CommandUnits:
    def size(self, episode: EpisodeRollout) -> tuple[int, int]:
        """Its tree's length (every turn's candidates side by side) and its turns."""
        return tree_length(len(episode.token_ids), episode.choice_turns), len(episode.choice_turns)

    def score(self, sequences: list[LearnSequence], learner: Learner, with_entropy: bool) -> ScoredUnits:
        """Each turn's log pi(c|s), its old value, its advantage, and pi(.|s)'s entropy (with gradient: the bonus)."""
        ids = [s.token_ids.tolist() for s in sequences]
        turns = [s.choice_turns for s in sequences]
        lengths = [tree_length(len(s.token_ids), s.choice_turns) for s in sequences]
        tree = choice_tree(ids, turns, row_tokens=row_width(lengths, max(learner.row_tokens, max(lengths))),
                           pad_id=learner.pad_id)
        scored = learner.forward(tree, False)
        device = scored.chosen.device
        old = torch.tensor([t.old_logprob for s in sequences for t in s.choice_turns], dtype=torch.float32,
                           device=device)
        advantages = torch.tensor([a for s in sequences for a in s.choice_advantages], dtype=torch.float32,
                                  device=device)
        reference = learner.reference(tree)
        entropy = scored.entropy.float()
        return ScoredUnits(logp=scored.chosen.float(), old=old, advantages=advantages, counts=[len(t) for t in turns],
                           ref=reference.chosen if reference is not None else None, entropy=entropy,
                           entropy_sum=(float(entropy.detach().sum()), float(len(entropy))))
