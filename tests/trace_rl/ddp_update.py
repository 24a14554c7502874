"""One learner update on a fixed synthetic batch, in one process or under torchrun (each rank holding the groups
`group % world == rank`); rank 0 writes the adapter and the update's statistics. Used by test_learner.py. The model
runs in fp64 (`numerics.float64_model`: tests/ must be importable), so that the two ways of summing the gradient
agree to fp64 rounding.

    python ddp_update.py OUT AGGREGATION
    python -m torch.distributed.run --standalone --nproc_per_node 2 ddp_update.py OUT AGGREGATION
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import sys
from pathlib import Path

import numpy as np
import torch
from numerics import float64_model
from safetensors.torch import save_file
from tracec.trace_rl.grpo.config import TrainConfig, config_from_dict
from tracec.trace_rl.grpo.distributed import Distributed, process_group
from tracec.trace_rl.grpo.learner import Learner, LearnSequence, SequenceInfo
from tracec.trace_rl.grpo.loss_units import TokenUnits, loss_units_for
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.packing import pack_sequences


def synthetic_batch(policy: Policy, *, groups: int = 4, members: int = 3, seed: int = 0) -> list[LearnSequence]:
    """Random sequences with a loss span each, random advantages, and old log-probs near the policy's own."""
    rng = np.random.default_rng(seed)
    sequences = []
    for group in range(groups):
        for member in range(members):
            length = int(rng.integers(20, 60))
            ids = rng.integers(7, 90, size=length)
            mask = np.zeros(length, dtype=bool)
            start = int(rng.integers(5, length - 5))
            mask[start:start + int(rng.integers(2, length - start))] = True
            advantages = np.where(mask, rng.normal(), 0).astype(np.float32)
            sequences.append(LearnSequence(key=(group, member), token_ids=ids, loss_mask=mask, advantages=advantages,
                                           old_logprobs=np.zeros(length, dtype=np.float32)))
    learner = Learner(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0), TrainConfig(), Distributed(),
                      TokenUnits())
    with torch.no_grad():  # old log-probs: the policy's own, moved a little so the ratio differs from 1
        batch = pack_sequences([s.token_ids.tolist() for s in sequences], [s.loss_mask.tolist() for s in sequences],
                               max_tokens_per_row=4096)
        own, _ = learner.scorer(batch, False)
    out = []
    for s, logp in zip(sequences, own):
        old = s.old_logprobs.copy()
        old[s.loss_mask] = logp.numpy() + rng.normal(0, 0.3, size=len(logp)).astype(np.float32)
        out.append(dataclasses.replace(s, old_logprobs=old))
    return out


def main(out: Path, aggregation: str) -> None:
    with process_group("cpu") as (dist, _):
        update(dist, out, aggregation)  # its Learner, whose DDP wrapper holds the group, ends with the call


def update(dist: Distributed, out: Path, aggregation: str) -> None:
    torch.set_num_threads(1)
    policy = Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=0)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.normal_(0, 0.05, generator=torch.Generator().manual_seed(p.numel()))
    float64_model(policy.model)
    batch = synthetic_batch(policy)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    config = config_from_dict({"optim": {"epochs": 2, "mini_batches": 2, "micro_batch_tokens": 70},
                               "loss": {"aggregation": aggregation, "clip_eps": 0.2}})
    learner = Learner(policy, optimizer, config, dist, loss_units_for(config))
    table = [SequenceInfo(key=s.key, length=len(s.token_ids), loss_tokens=int(s.loss_mask.sum()),
                          rank=s.key[0] % dist.world) for s in batch]
    stats = learner.update([s for s in batch if dist.owns(s.key[0])], table, seed=0, iteration=0)
    if dist.is_main:
        save_file(policy.adapter_state(), str(out / "adapter.safetensors"))
        (out / "stats.json").write_text(json.dumps(dataclasses.asdict(stats)))


if __name__ == "__main__":
    # A rank stuck (in a collective, or in the group's teardown) prints every thread's stack and exits, inside the
    # test's 300 s bound: the failure then says where it hung, not only that it did.
    faulthandler.dump_traceback_later(240, exit=True)
    main(Path(sys.argv[1]), sys.argv[2])
