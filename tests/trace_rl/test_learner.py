"""The learner: only the adapter moves, an update follows the advantages, and DDP gives the one-process update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_update import synthetic_batch
from hypothesis import given
from hypothesis import strategies as st
from numerics import float64_model, forward_roundings, forward_size, tolerance
from safetensors.torch import load_file
from tracec.trace_rl.grpo.config import config_from_dict
from tracec.trace_rl.grpo.distributed import Distributed
from tracec.trace_rl.grpo.learner import (
    ROW_TARGET,
    Learner,
    SequenceInfo,
    _rows_needed,
    row_width,
)
from tracec.trace_rl.grpo.loss_units import TokenUnits
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.packing import pack_sequences

HERE = Path(__file__).resolve().parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _table(batch: list) -> list[SequenceInfo]:  # type: ignore[type-arg]
    return [SequenceInfo(key=s.key, length=len(s.token_ids), loss_tokens=int(s.loss_mask.sum()), rank=0) for s in batch]


def test_only_the_lora_weights_move() -> None:
    policy = Policy.load("tiny", LoraSection(rank=4), seed=0)
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    batch = synthetic_batch(policy)
    learner = Learner(policy, torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2),
                      config_from_dict({"optim": {"mini_batches": 2}}), Distributed(), TokenUnits())
    stats = learner.update(batch, _table(batch), seed=0, iteration=0)
    assert stats.steps == 2 and min(stats.time_forward, stats.time_backward, stats.time_optimizer) > 0
    moved = {name for name, p in policy.model.named_parameters() if not torch.equal(p, before[name])}
    assert moved and all("lora_" in name for name in moved)
    # B starts at zero, so the first step moves B (A's gradient is B-weighted); both train
    assert any("lora_B" in name for name in moved)
    assert all(not p.requires_grad for name, p in policy.model.named_parameters() if "lora_" not in name)


def test_an_update_raises_the_log_prob_of_good_actions_and_lowers_the_bad() -> None:
    policy = Policy.load("tiny", LoraSection(rank=8, alpha=16), seed=0)
    batch = synthetic_batch(policy, groups=2, members=4, seed=3)
    learner = Learner(policy, torch.optim.AdamW(policy.trainable_parameters(), lr=3e-3),
                      config_from_dict({"optim": {"mini_batches": 1, "epochs": 1}}), Distributed(), TokenUnits())

    def logprobs() -> list[float]:
        packed = pack_sequences([s.token_ids.tolist() for s in batch], [s.loss_mask.tolist() for s in batch],
                                max_tokens_per_row=4096)
        with torch.no_grad():
            return [float(lp.mean()) for lp in learner.scorer(packed, False)[0]]

    start = logprobs()
    learner.update(batch, _table(batch), seed=0, iteration=0)
    change = np.array(logprobs()) - np.array(start)
    advantage = np.array([float(s.advantages[s.loss_mask][0]) for s in batch])
    assert np.corrcoef(change, advantage)[0, 1] > 0.5
    assert np.all(np.sign(change[np.abs(advantage) > 0.5]) == np.sign(advantage[np.abs(advantage) > 0.5]))


def _run_update(argv: list[str], env: dict[str, str]) -> None:
    """Run ddp_update.py; bounded (a rank that hangs fails the test instead of holding the suite), and a failure
    shows the end of what the processes printed (a hung rank prints its stacks: see ddp_update.py)."""
    try:
        subprocess.run(argv, check=True, env=env, capture_output=True, text=True, timeout=300)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        printed = error.stderr or b""  # bytes after a timeout even with text=True
        printed = printed.decode(errors="replace") if isinstance(printed, bytes) else printed
        pytest.fail(f"{error}\n{printed[-6000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_two_gloo_ranks_make_the_one_process_update(tmp_path: Path, aggregation: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]), "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    script = str(HERE / "ddp_update.py")
    _run_update([sys.executable, script, str(one), aggregation], env)
    _run_update([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script,
                 str(two), aggregation], env)
    a, b = load_file(str(one / "adapter.safetensors")), load_file(str(two / "adapter.safetensors"))
    start = Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=0)
    moved = max(float((a[k] - start.adapter_state()[k]).abs().max()) for k in a)
    gap = max(float((a[k] - b[k]).abs().max()) for k in a)
    stats_one, stats_two = (json.loads((d / "stats.json").read_text()) for d in (one, two))
    # The rule (tests/numerics.py), in fp64: a gradient entry of each step is a forward and a backward over a row of
    # <= 70 tokens, summed over the micro-batches and ranks in two orders. AdamW turns a gradient's error into a
    # step's error of at most lr / eps times it (an entry whose gradient is ~0 is divided by eps = 1e-8); four steps.
    largest = max(step["grad_norm"] for step in stats_one["per_step"])
    gradient = tolerance(2 * forward_roundings(start.model.config, 70), largest, torch.float64)
    assert moved > 1e-2 and gap <= 4 * 1e-2 * gradient / 1e-8
    # The learner keeps the loss weights and the entropy sums in fp32 (`aggregation_weights`, `Learner._step`):
    # sums over the loss tokens in fp32, relative to each statistic
    relative = tolerance(stats_one["loss_tokens"] + 2, 1.0, torch.float32)
    for key in ("loss", "clip_fraction", "ratio", "grad_norm", "entropy"):
        assert stats_two[key] == pytest.approx(stats_one[key], rel=relative)
    assert stats_one["steps"] == stats_two["steps"] == 4


def test_rollouts_from_another_engine_get_the_trainers_old_log_probs_and_masked_weights() -> None:
    policy = Policy.load("tiny", LoraSection(rank=4), seed=0)
    float64_model(policy.model)  # packed in other rows than below: in fp64 the two agree to fp64 rounding
    batch = synthetic_batch(policy)  # "sampler" log-probs: the policy's own plus noise
    learner = Learner(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0),
                      config_from_dict({"optim": {"micro_batch_tokens": 100}}), Distributed(), TokenUnits())
    corrected = learner.off_policy_correction(batch, cap=3.0)
    assert [s.key for s in corrected] == [s.key for s in batch]
    packed = pack_sequences([s.token_ids.tolist() for s in batch], [s.loss_mask.tolist() for s in batch],
                            max_tokens_per_row=4096)
    with torch.no_grad():
        own = [lp.numpy() for lp in learner.scorer(packed, False)[0]]
    # the rule (tests/numerics.py): each log-prob a forward over a row of <= 100 tokens in fp64, at the size of its
    # values, recorded in fp32 (`LearnSequence.old_logprobs`)
    size = max(*(float(np.abs(t).max()) for t in own),
               *(forward_size(policy.model, torch.tensor([s.token_ids.tolist()])) for s in batch))
    forward = tolerance(forward_roundings(policy.model.config, 100), size, torch.float64)
    for before, after, trainer in zip(batch, corrected, own):
        np.testing.assert_allclose(after.old_logprobs[after.loss_mask], trainer,
                                   atol=tolerance(1, size, np.float32) + forward, rtol=0)
        ratio = float(np.exp(np.sum(trainer - before.old_logprobs[before.loss_mask])))
        # the weight: the exponential of a sum of such log-probs, relative to itself
        relative = len(trainer) * forward + tolerance(len(trainer) + 2, size, np.float64)
        assert after.weight == (pytest.approx(ratio, rel=relative) if ratio <= 3.0 else 0.0)
    assert any(s.weight == 0.0 for s in corrected) and any(s.weight > 0 for s in corrected)


@given(lengths=st.lists(st.integers(2, 700), min_size=1, max_size=40), most=st.integers(700, 4096))
def test_rows_are_about_the_target_width_and_evenly_filled(lengths: list[int], most: int) -> None:
    width = row_width(lengths, most)
    assert max(lengths) <= width <= most
    rows = _rows_needed(lengths, width)
    if width < most:  # as few rows as rows of ROW_TARGET tokens would hold
        assert rows <= -(-sum(lengths) // ROW_TARGET)
    if len(set(lengths)) == 1 and width < most:  # equal lengths fill the rows evenly: at most one row's slack
        assert rows * width - sum(lengths) <= width
