"""The chunked log-prob kernel against a direct transcription of `log_softmax(h @ W.T / T).gather(t)` in float64.

Values, entropies and gradients (for the hidden states, and for the head when it is trainable) on random shapes,
chunkings and tilings, with and without temperature, in fp32 at language-model logit scales and in fp64 at any
scale; the Triton kernels, run by Triton's interpreter, against the torch tiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import tolerance
from tracec.trace_rl.policy.logprobs import token_logprobs


def naive(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
          temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) and the entropy, from the full logits in float64."""
    logp = torch.log_softmax(hidden.double() @ weight.double().T / temperature, dim=-1)
    return logp.gather(1, targets[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)


def draw(seed: int, n: int, width: int, vocab: int, scale: float,
         dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator) * scale / width ** 0.5  # logits of std ~ scale
    targets = torch.randint(0, vocab, (n,), generator=generator)
    upstream = torch.randn(n, generator=generator, dtype=torch.float64)  # d loss / d logp, one per row
    return hidden.to(dtype), weight.to(dtype), targets, upstream


def gradients(logp: torch.Tensor, upstream: torch.Tensor, *leaves: torch.Tensor) -> list[torch.Tensor | None]:
    grads = iter(torch.autograd.grad((logp.double() * upstream).sum(), [x for x in leaves if x.requires_grad]))
    return [next(grads) if x.requires_grad else None for x in leaves]


def logit_size(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> float:
    """The largest sum |h| . |w| / T a logit accumulates (at least 1): the m of the rule (tests/numerics.py)."""
    if not len(hidden):
        return 1.0
    return max(1.0, float((hidden.detach().abs().double() @ weight.detach().abs().double().T).max()) / temperature)


def value_tolerance(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> float:
    """The rule for a log-prob or an entropy computed in `hidden`'s compute dtype (fp64, else fp32): a logit's dot
    product (width terms), the log-sum-exp and the entropy's sum over the vocabulary, a few elementwise steps; all
    at the logits' size."""
    dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    return tolerance(hidden.shape[1] + weight.shape[0] + 8, logit_size(hidden, weight, temperature), dtype)


def gradient_sizes(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, upstream: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What each entry of the two gradients of sum(upstream * logp) accumulates, in absolute values: per row
    |u_i| (|W_t| + E_p|W|) / T for the hidden states, and sum_i |u_i| (onehot + p_i) |h_i| / T for the head."""
    h, w, scale = hidden.detach().double(), weight.detach().double(), upstream.abs()[:, None] / temperature
    p = torch.softmax(h @ w.T / temperature, dim=-1)
    onehot = torch.nn.functional.one_hot(targets, weight.shape[0]).double()
    return scale * (w.abs()[targets] + p @ w.abs()), ((onehot + p) * scale).T @ h.abs()


def compare(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, upstream: torch.Tensor,
            temperature: float, **options: int) -> None:
    """Ours against `naive`, within the rule's bound (tests/numerics.py): values and entropies within
    `value_tolerance`; each gradient entry within its own size (`gradient_sizes`) times the relative error the
    probabilities carry (as a log-prob does, and the vocabulary sum of E_p[W] again) and the sum over rows adds."""
    logp, entropy = token_logprobs(hidden, weight, targets, temperature=temperature, with_entropy=True, **options)
    expected_logp, expected_entropy = naive(hidden, weight, targets, temperature)
    assert logp.dtype == entropy.dtype == (torch.float64 if hidden.dtype == torch.float64 else torch.float32)
    close = value_tolerance(hidden, weight, temperature)
    torch.testing.assert_close(logp.double(), expected_logp, atol=close, rtol=0.0)
    torch.testing.assert_close(entropy.double(), expected_entropy, atol=close, rtol=0.0)
    assert not entropy.requires_grad
    if hidden.requires_grad or weight.requires_grad:
        ours = gradients(logp, upstream, hidden, weight)
        theirs = gradients(naive(hidden, weight, targets, temperature)[0], upstream, hidden, weight)
        dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        relative = tolerance(hidden.shape[1] + 2 * weight.shape[0] + hidden.shape[0] + 8,
                             logit_size(hidden, weight, temperature), dtype)
        for mine, reference, size in zip(ours, theirs, gradient_sizes(hidden, weight, targets, upstream, temperature),
                                         strict=True):
            assert (mine is None) == (reference is None)
            if mine is not None and reference is not None:
                assert ((mine.double() - reference.double()).abs() <= relative * size).all()


shapes = {"n": st.integers(1, 70), "width": st.integers(1, 40), "vocab": st.integers(1, 300),
          "chunk": st.integers(1, 320), "rows_per_tile": st.integers(1, 80), "hidden_grad": st.booleans(),
          "head_grad": st.booleans(), "seed": st.integers(0, 2**31 - 1)}


@settings(max_examples=80, deadline=None)
@given(temperature=st.one_of(st.just(1.0), st.floats(0.5, 2.0)), scale=st.floats(0.1, 4.0), **shapes)
def test_fp32_equals_the_naive_formula_to_its_rounding(n: int, width: int, vocab: int, chunk: int,
                                                        rows_per_tile: int, temperature: float, scale: float,
                                                        hidden_grad: bool, head_grad: bool, seed: int) -> None:
    """Logits of std up to 8 (4 / T at T = 0.5), as language models have them. The fp32 bound is loose (~1e-3 at
    the largest shapes); the fp64 test below, whose bound is ~1e-10, is the one that catches a wrong formula."""
    hidden, weight, targets, upstream = draw(seed, n, width, vocab, scale)
    compare(hidden.requires_grad_(hidden_grad), weight.requires_grad_(head_grad), targets, upstream,
            temperature, chunk_size=chunk, rows_per_tile=rows_per_tile)


@settings(max_examples=60, deadline=None)
@given(temperature=st.one_of(st.just(1.0), st.floats(0.05, 5.0)), scale=st.floats(0.01, 30.0), **shapes)
def test_fp64_equals_the_naive_formula_at_any_scale(n: int, width: int, vocab: int, chunk: int, rows_per_tile: int,
                                                    temperature: float, scale: float, hidden_grad: bool,
                                                    head_grad: bool, seed: int) -> None:
    """The same arithmetic in fp64, on logits up to hundreds: the online logsumexp loses nothing."""
    hidden, weight, targets, upstream = draw(seed, n, width, vocab, scale, dtype=torch.float64)
    compare(hidden.requires_grad_(hidden_grad), weight.requires_grad_(head_grad), targets, upstream,
            temperature, chunk_size=chunk, rows_per_tile=rows_per_tile)


def test_gradcheck_in_fp64() -> None:
    """torch's finite-difference check of both gradients, with a temperature and several tiles each way."""
    hidden, weight, targets, _ = draw(6, 7, 5, 23, 2.0, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda h, w: token_logprobs(h, w, targets, temperature=0.7, chunk_size=6, rows_per_tile=3),
        (hidden.requires_grad_(True), weight.requires_grad_(True)))


def test_a_frozen_head_gets_no_gradient_and_the_hidden_states_do() -> None:
    hidden, weight, targets, _ = draw(0, 50, 16, 200, 2.0)
    hidden.requires_grad_(True)
    token_logprobs(hidden, weight, targets, chunk_size=64).sum().backward()
    assert weight.grad is None and hidden.grad is not None
    assert hidden.grad.dtype == hidden.dtype and hidden.grad.shape == hidden.shape


def test_without_autograd_the_values_are_the_same() -> None:
    """No gradient wanted: the forward skips the per-row gradients and returns the same log-probs."""
    hidden, weight, targets, _ = draw(1, 40, 12, 150, 3.0)
    with torch.no_grad():
        plain = token_logprobs(hidden, weight, targets, chunk_size=32)
    tracked = token_logprobs(hidden.requires_grad_(True), weight, targets, chunk_size=32)
    assert torch.equal(plain, tracked.detach())


def test_backward_twice_gives_the_same_gradient() -> None:
    """The saved per-row gradients are scaled, never overwritten: a retained graph replays exactly."""
    hidden, weight, targets, upstream = draw(2, 30, 8, 90, 2.0)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    loss = (token_logprobs(hidden, weight, targets, chunk_size=16) * upstream.float()).sum()
    first = torch.autograd.grad(loss, [hidden, weight], retain_graph=True)
    second = torch.autograd.grad(loss, [hidden, weight])
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_bfloat16_inputs_compute_in_fp32() -> None:
    hidden, weight, targets, _ = draw(3, 64, 32, 500, 4.0, dtype=torch.bfloat16)
    hidden.requires_grad_(True)
    logp = token_logprobs(hidden, weight, targets, temperature=0.7, chunk_size=128)
    assert logp.dtype == torch.float32
    # bf16 values are exact in fp32: what rounds is the fp32 arithmetic (bf16 arithmetic would be off by ~1e-1)
    torch.testing.assert_close(logp.double(), naive(hidden, weight, targets, 0.7)[0],
                               atol=value_tolerance(hidden.float(), weight.float(), 0.7), rtol=0.0)
    logp.sum().backward()
    assert hidden.grad is not None and hidden.grad.dtype == torch.bfloat16


def test_no_rows_gives_empty_results() -> None:
    hidden, weight, _, _ = draw(4, 1, 8, 20, 1.0)
    logp, entropy = token_logprobs(hidden[:0].requires_grad_(True), weight, torch.zeros(0, dtype=torch.long),
                                   with_entropy=True)
    assert logp.shape == entropy.shape == (0,)


@pytest.mark.parametrize(("change", "message"), [
    ({"targets": torch.tensor([0, 20])}, r"target ids span \[0, 20\], outside the vocabulary \[0, 20\)"),
    ({"targets": torch.tensor([0])}, r"targets \(1,\) torch.int64 must be \(2,\)"),
    ({"targets": torch.tensor([0.0, 1.0])}, "integer token ids"),
    ({"weight": torch.zeros(20, 9)}, r"must be \(N, H\) and \(V, H\) with the same H"),
    ({"weight": torch.zeros(20, 8, dtype=torch.float64)}, "must share dtype and device"),
    ({"temperature": 0.0}, "temperature=0.0 must be > 0"),
    ({"chunk_size": 0}, "chunk_size=0 must be >= 1"),
    ({"backend": "cuda"}, "backend='cuda' must be 'auto', 'torch' or 'triton'"),
])
def test_bad_arguments_are_named(change: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"hidden": torch.zeros(2, 8), "weight": torch.zeros(20, 8),
                                    "targets": torch.tensor([0, 19])}
    arguments.update(change)
    keywords = {k: arguments.pop(k) for k in ("temperature", "chunk_size", "backend") if k in arguments}
    with pytest.raises(ValueError, match=message):
        token_logprobs(arguments["hidden"], arguments["weight"], arguments["targets"], **keywords)  # type: ignore


def test_auto_takes_the_triton_tiles_on_a_cuda_tensor_where_triton_is_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the tensor's device and dtype decide; a stand-in carries them (no GPU here). The GPU check found `auto`
    refused on CUDA before this."""
    from tracec.trace_rl.policy import logprobs

    on_cuda = SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32)
    assert logprobs._tile_ops("auto", on_cuda) is not logprobs.TORCH_TILES  # type: ignore[arg-type]
    assert logprobs._tile_ops("auto", SimpleNamespace(device=torch.device("cuda"),  # type: ignore[arg-type]
                                                      dtype=torch.float64)) is logprobs.TORCH_TILES
    assert logprobs._tile_ops("auto", torch.zeros(1)) is logprobs.TORCH_TILES
    monkeypatch.setattr(logprobs.importlib.util, "find_spec", lambda name: None)  # Triton not installed
    assert logprobs._tile_ops("auto", on_cuda) is logprobs.TORCH_TILES  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Triton, through its interpreter on CPU. Triton decides between compiling and interpreting when `triton.language`
# is first imported, and transformers imports it early; so the cases run in a fresh process with TRITON_INTERPRET=1
# (this file run as a script) and the results come back in a file.

TRITON_CASES = [  # (seed, rows, width, vocab, chunk, rows per tile, temperature)
    *((seed, 1 + seed % 9, 1 + seed * 7 % 16, 1 + seed * 37 % 90, 1 + seed * 13 % 100, 1 + seed % 4,
       (1.0, 0.6, 1.7)[seed % 3]) for seed in range(16)),
    (99, 3, 8, 2600, 2300, 4, 0.8),  # tiles wider than a program's 1024 columns: the loops and masked tails
]


def backend_results(backend: str) -> list[list[torch.Tensor]]:
    results = []
    for seed, n, width, vocab, chunk, rows_per_tile, temperature in TRITON_CASES:
        hidden, weight, targets, upstream = draw(seed, n, width, vocab, 3.0)
        leaves = [hidden.requires_grad_(True), weight.requires_grad_(True)]
        logp, entropy = token_logprobs(*leaves, targets, temperature=temperature, chunk_size=chunk,
                                       rows_per_tile=rows_per_tile, with_entropy=True, backend=backend)  # type: ignore
        results.append([logp.detach(), entropy, *gradients(logp, upstream, *leaves)])
    return results


def test_triton_kernels_equal_the_torch_tiles(tmp_path: Path) -> None:
    out = tmp_path / "triton.pt"
    importable = os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])  # tests/
    subprocess.run([sys.executable, __file__, str(out)], check=True, timeout=600,
                   env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": importable})
    triton = torch.load(out)
    assert len(triton) == len(TRITON_CASES)
    for case, ours, reference in zip(TRITON_CASES, triton, backend_results("torch"), strict=True):
        # two fp32 computations in different orders: the rule (tests/numerics.py), as `compare` states it
        seed, n, width, vocab, _, _, temperature = case
        hidden, weight, targets, upstream = draw(seed, n, width, vocab, 3.0)
        close = value_tolerance(hidden, weight, temperature)
        relative = tolerance(width + 2 * vocab + n + 8, logit_size(hidden, weight, temperature), torch.float32)
        bounds = [close, close, *(relative * size for size in gradient_sizes(hidden, weight, targets, upstream,
                                                                              temperature))]
        for mine, theirs, bound in zip(ours, reference, bounds, strict=True):
            assert ((mine - theirs).abs() <= bound).all(), (case, float((mine - theirs).abs().max()))


if __name__ == "__main__":  # the Triton side of the test above, in its own process
    assert os.environ.get("TRITON_INTERPRET") == "1"
    torch.save(backend_results("triton"), sys.argv[1])
