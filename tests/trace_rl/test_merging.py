"""Merging LoRA adapters: the linear merge is the exact weighted sum of the deltas and loads as a working adapter on
the tiny model; TIES equals a direct numpy transcription of the paper's three steps; unmergeable adapters are named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import float64_model, forward_roundings, forward_size, tolerance
from safetensors.torch import load_file, save_file
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.merging import MergeError, merge_linear, merge_ties, read_lora, ties_delta
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters

TARGETS = ("q_proj", "v_proj")


def _adapter(folder: Path, *, rank: int, alpha: float, seed: int, targets: tuple[str, ...] = TARGETS) -> Path:
    """A tiny-model adapter in peft's format with random (nonzero) factors."""
    policy = Policy.load("tiny", LoraSection(rank=rank, alpha=alpha, targets=targets))
    policy.save_adapter(folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    save_file({k: 0.1 * torch.randn(v.shape, generator=generator) for k, v in tensors.items()},
              str(folder / "adapter_model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("adapters")
    return [_adapter(root / "a", rank=4, alpha=8, seed=1), _adapter(root / "b", rank=2, alpha=6, seed=2)]


def _deltas(folder: Path, *, absolute: bool = False) -> dict[str, torch.Tensor]:
    """Each module's s B A, read directly from the files (s = alpha / r); with `absolute`, s |B| |A|: what each
    entry's sum accumulates."""
    config = json.loads((folder / "adapter_config.json").read_text())
    tensors = {k: v.double().abs() if absolute else v.double()
               for k, v in load_file(str(folder / "adapter_model.safetensors")).items()}
    scale = config["lora_alpha"] / config["r"]
    return {key.removesuffix(".lora_A.weight"): scale * (tensors[key.replace("lora_A", "lora_B")] @ tensors[key])
            for key in tensors if key.endswith("lora_A.weight")}


def _written_tolerance(folder: Path, roundings: int) -> float:
    """How far the delta s B A of a merged adapter may be from the exact merge: the merge computes in fp64 and
    writes its factors in the adapters' dtype, fp32, which rounds `roundings` factors of each product (B alone for
    a linear merge, both for a factored one); the rule (tests/numerics.py) at the largest sum s |B| |A|."""
    return tolerance(roundings, max(float(delta.max()) for delta in _deltas(folder, absolute=True).values()),
                     torch.float32)


def test_the_linear_merge_is_the_weighted_sum_of_the_deltas(adapters: list[Path], tmp_path: Path) -> None:
    one, two = (_deltas(f) for f in adapters)
    result = merge_linear(adapters, tmp_path / "mean")
    assert result.rank == 6 and result.weights == (0.5, 0.5) and result.residual == 0.0
    merged = _deltas(tmp_path / "mean")
    assert set(merged) == set(one) and len(merged) == 2 * len(TARGETS)  # 2 layers
    close = _written_tolerance(tmp_path / "mean", 1)
    for module, delta in merged.items():
        torch.testing.assert_close(delta, 0.5 * one[module] + 0.5 * two[module], atol=close, rtol=0)
    merge_linear(adapters, tmp_path / "weighted", weights=[1.0, -2.0])
    close = _written_tolerance(tmp_path / "weighted", 1)
    for module, delta in _deltas(tmp_path / "weighted").items():
        torch.testing.assert_close(delta, one[module] - 2.0 * two[module], atol=close, rtol=0)
    assert json.loads((tmp_path / "mean" / "merge.json").read_text())["method"] == "linear"


def test_a_merged_folder_loads_and_decodes_as_the_hand_merged_weights(adapters: list[Path], tmp_path: Path,
                                                                      one_torch_thread: None) -> None:
    merge_linear(adapters, tmp_path / "mean")
    model = PeftAdapters.load("tiny", {"mean": tmp_path / "mean"})
    float64_model(model.policy.model)  # the fp32 factors as they are, the arithmetic in fp64
    ids = torch.tensor([[7, 20, 33, 41, 52, 60, 9]])
    with torch.no_grad(), model.active("mean"):
        merged = model.policy.model(input_ids=ids).logits
    one, two = (_deltas(f) for f in adapters)
    by_hand = Policy.load("tiny", LoraSection(targets=TARGETS))
    float64_model(by_hand.model)
    with torch.no_grad():
        for module in one:
            layer = by_hand.model.get_submodule(module).get_base_layer()
            layer.weight += 0.5 * one[module] + 0.5 * two[module]
        with by_hand.base_model():
            expected = by_hand.model(input_ids=ids).logits
            size = forward_size(by_hand.model, ids)
        with model.active(None):
            base = model.policy.model(input_ids=ids).logits
    # the rule (tests/numerics.py): the merged B written in fp32 (one rounding in an adapted projection a layer, on
    # the way to a logit), then the forward's roundings in fp64
    config = model.policy.model.config
    close = tolerance(config.num_hidden_layers, size, torch.float32) + tolerance(
        forward_roundings(config, ids.shape[1]), size, torch.float64)
    torch.testing.assert_close(merged, expected, atol=close, rtol=0)
    assert not torch.allclose(merged, base, atol=1e-3)  # the adapter does something


def _ties_by_hand(deltas: list[np.ndarray], density: float, scale: float) -> np.ndarray:
    """Yadav et al. 2023, section 3: trim (top-k% by magnitude), elect (sign of the sum), disjoint merge."""
    trimmed = []
    for delta in deltas:
        keep = math.ceil(density * delta.size)
        threshold = np.sort(np.abs(delta).ravel())[::-1][keep - 1]
        trimmed.append(np.where(np.abs(delta) >= threshold, delta, 0.0))
    tau = np.stack(trimmed)
    gamma = np.where(tau.sum(axis=0) >= 0, 1.0, -1.0)
    merged = np.zeros_like(deltas[0])
    for index in np.ndindex(merged.shape):
        agreeing = [t[index] for t in tau if t[index] != 0 and np.sign(t[index]) == gamma[index]]
        merged[index] = sum(agreeing) / len(agreeing) if agreeing else 0.0
    return scale * merged


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), rows=st.integers(1, 6), cols=st.integers(1, 6),
       density=st.floats(0.05, 1.0), scale=st.floats(0.1, 2.0))
def test_ties_is_the_papers_three_steps(seed: int, n: int, rows: int, cols: int, density: float,
                                        scale: float) -> None:
    rng = np.random.default_rng(seed)
    deltas = [rng.normal(size=(rows, cols)) for _ in range(n)]
    got = ties_delta([torch.from_numpy(d) for d in deltas], density=density, scale=scale).numpy()
    # the rule (tests/numerics.py): a sum of <= 4 kept entries, a division, the scale; at scale * the largest entry
    size = scale * max(1.0, *(float(np.abs(d).max()) for d in deltas))
    np.testing.assert_allclose(got, _ties_by_hand(deltas, density, scale), atol=tolerance(n + 2, size, np.float64),
                               rtol=0)


def test_the_ties_merge_writes_its_delta_and_reports_what_the_svd_lost(adapters: list[Path], tmp_path: Path) -> None:
    one, two = (_deltas(f) for f in adapters)
    exact = merge_ties(adapters, tmp_path / "exact", density=0.3, scale=0.8, rank=64)  # full rank: SVD exact
    assert exact.rank == 64 and exact.residual == 0.0  # every singular value kept: nothing is left to sum
    # The SVD's factors, written in fp32: both factors of each product rounded. (The fp64 SVD itself is backward
    # stable, ~1e-13 here, far below.)
    close = _written_tolerance(tmp_path / "exact", 2)
    for module, delta in _deltas(tmp_path / "exact").items():
        expected = _ties_by_hand([one[module].numpy(), two[module].numpy()], 0.3, 0.8)
        np.testing.assert_allclose(delta.numpy(), expected, atol=close, rtol=0)
    lossy = merge_ties(adapters, tmp_path / "lossy", density=0.3)
    assert lossy.rank == 6  # the default: the sum of the ranks
    assert 0 < lossy.residual <= lossy.worst_residual < 1  # trimming made the delta full rank: the SVD cut it
    sizes = _deltas(tmp_path / "lossy", absolute=True)
    for module, delta in _deltas(tmp_path / "lossy").items():
        full = _ties_by_hand([one[module].numpy(), two[module].numpy()], 0.3, 1.0)
        singular = np.linalg.svd(full, compute_uv=False)  # Eckart-Young: the best rank 6 loses the rest exactly
        # the factors' fp32 rounding moves the norm by at most the norm of its effect (tests/numerics.py)
        close = tolerance(2, float(np.linalg.norm(sizes[module].numpy())), np.float32)
        assert np.linalg.norm(full - delta.numpy()) == pytest.approx(np.sqrt((singular[6:] ** 2).sum()), abs=close)
    assert read_lora(tmp_path / "lossy").scaling == 1.0


def test_adapters_that_do_not_merge_are_named(adapters: list[Path], tmp_path: Path) -> None:
    other = _adapter(tmp_path / "other", rank=4, alpha=8, seed=3, targets=("q_proj", "k_proj"))
    with pytest.raises(MergeError, match=rf"{adapters[0]} and {other} adapt different modules"):
        merge_linear([adapters[0], other], tmp_path / "out")
    shaped = tmp_path / "shaped"
    shaped.mkdir()
    (shaped / "adapter_config.json").write_text((adapters[0] / "adapter_config.json").read_text())
    tensors = load_file(str(adapters[0] / "adapter_model.safetensors"))
    save_file({k: torch.zeros(v.shape[0], 32) if "lora_A" in k else v for k, v in tensors.items()},
              str(shaped / "adapter_model.safetensors"))
    with pytest.raises(MergeError, match=rf"{adapters[0]} and {shaped} adapt .* of different shapes"):
        merge_ties([adapters[0], shaped], tmp_path / "out")
    with pytest.raises(MergeError, match="not an adapter folder"):
        merge_linear([adapters[0], tmp_path / "missing"], tmp_path / "out")
    with pytest.raises(MergeError, match="give one finite number per adapter"):
        merge_linear(adapters, tmp_path / "out", weights=[1.0])
    with pytest.raises(MergeError, match="density = 0"):
        merge_ties(adapters, tmp_path / "out", density=0.0)
