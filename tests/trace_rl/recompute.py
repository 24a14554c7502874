"""The trainer's view of sampled episodes, for tests that compare it with what the sampler recorded."""

from __future__ import annotations

import numpy as np
import torch
from tracec.trace_rl.grpo.learner import PackedLogprobs
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.packing import pack_sequences
from tracec.trace_rl.rollouts.engine import EpisodeRollout


def recomputed_logprobs(policy: Policy, episodes: list[EpisodeRollout], temperature: float) -> list[np.ndarray]:
    """The trainer's log-probs (packed, one forward) of every sampled token."""
    batch = pack_sequences([e.token_ids.tolist() for e in episodes], [e.sampled.tolist() for e in episodes],
                           max_tokens_per_row=4096)
    with torch.no_grad():
        logprobs, _ = PackedLogprobs(policy.model, temperature)(batch, False)
    return [lp.numpy() for lp in logprobs]
