"""Log-probabilities of chosen tokens without the full logits: the LM head over vocabulary chunks, for RL losses.

`token_logprobs(hidden, weight, targets)` gives `log_softmax(hidden @ weight.T / temperature)[i, targets[i]]` in
fp32 (and, if asked, each row's entropy) while holding only one `(rows, chunk)` tile of logits at a time: an online
logsumexp walks the vocabulary chunk by chunk (the running maximum, the sum of `exp(z - max)`, and for the entropy
the sum of `exp(z - max) * (z - max)`, each rescaled when the maximum grows). The full logits of a packed batch
(8192 tokens x 49152 words is 1.6 GB in fp32, and autograd keeps two or three such tensors) are what makes the naive
`log_softmax(...).gather(...)` the memory peak of a GRPO step.

Why the backward needs no second pass for the hidden states: `d logp_i / d h_i = (W[t_i] - E_{p_i}[W]) / T` does not
depend on the incoming gradient except through one scalar per row, so the forward accumulates `E_p[W]` online
beside the logsumexp (`sum exp(z - max) W_v`, rescaled like the sum) and keeps `(N, H)` per-row gradients; the
backward only scales them. That is two GEMMs in all for a frozen head, the same as the naive version (which also
needs two), where recomputing each chunk in the backward would need three. The head's own gradient, when it is
trainable, does need the incoming gradient per vocabulary entry: the backward then recomputes each tile from the
saved logsumexp and accumulates `G.T @ h`. A frozen head (`weight.requires_grad` False: with LoRA the head is frozen,
and in SmolLM2 tied to the embeddings) gets no gradient buffer at all.

`sequence_logprobs(model, batch)` runs a causal LM's decoder body on a `PackedBatch` (see `packing.py`) and sends
only the hidden states whose next token carries a loss through the head. It passes `attention_mask=None`,
`use_cache=False` and position ids that restart per sequence: transformers (since 4.54, `masking_utils`; checked
here with 5.24) then finds the sequence boundaries from the position ids and builds a block-diagonal causal mask for
the eager, SDPA and flex attention kernels (flash attention, untested here, reads the same position ids). An all-ones
mask or a cache turns that detection off and lets packed sequences attend to each other (the tests show both); an older
transformers is refused with an error.

The tile arithmetic (fold a logits tile into the running statistics; turn a tile into the head's gradient) is the
part `logprobs_triton.py` replaces with Triton kernels on GPUs (`backend="triton"`); the GEMMs and the walk over
chunks are shared, so the torch version here is the reference for both.
Left out: a gradient through the entropy (it is returned for logging and metrics), a bias on the LM head, logit
soft-capping or scaling (Gemma 2, Cohere: refused with an error), and an LM head that is itself adapted (LoRA on
`lm_head`: refused, since its weight alone would be wrong); and bf16 GEMMs: bf16 and fp16 inputs are multiplied
in fp32, exact but slower on a GPU than tensor-core GEMMs with fp32 outputs would be.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import transformers
from torch import Tensor
from tracec.trace_rl.policy.packing import PackedBatch

ROWS_PER_TILE = 1024  # with chunk_size 4096 a tile of logits is 16 MB in fp32
Backend = Literal["auto", "torch", "triton"]


# ---------------------------------------------------------------------------------------------------------------
# Tile arithmetic: the torch reference. logprobs_triton.py provides the same two functions as Triton kernels.

def fold_tile(tile: Tensor, running_max: Tensor, sum_exp: Tensor, sum_exp_shifted: Tensor | None,
              scratch: Tensor | None) -> Tensor:
    """Fold one `(rows, cols)` tile of scaled logits (fp32, or fp64) into the running statistics, in place.

    Afterwards `tile` holds `exp(z - new_max)` and the statistics are relative to the new maximum; returns the
    factor `exp(old_max - new_max)` (rows,) by which anything accumulated against the old maximum must be rescaled.
    `sum_exp_shifted` (entropy only) is `sum exp(z - max) * (z - max)`; `scratch` is a buffer like `tile` for it.
    """
    new_max = torch.maximum(running_max, tile.amax(dim=1))
    rescale = torch.exp(running_max - new_max)
    if sum_exp_shifted is not None:
        assert scratch is not None
        shifted = torch.sub(tile, new_max[:, None], out=scratch)  # z - new_max, <= 0
        torch.exp(shifted, out=tile)
        shifted_sum = torch.bmm(tile[:, None, :], shifted[:, :, None]).view(-1)
        # Re-base the old sum on the new maximum: each old term's shift grows by (old_max - new_max).
        sum_exp_shifted.add_((running_max - new_max) * sum_exp).mul_(rescale).add_(shifted_sum)
    else:
        tile.sub_(new_max[:, None]).exp_()
    sum_exp.mul_(rescale).add_(tile.sum(dim=1))
    running_max.copy_(new_max)
    return rescale


def head_grad_tile(tile: Tensor, logsumexp: Tensor, grad: Tensor, local_targets: Tensor) -> None:
    """Turn a tile of scaled logits into `d loss / d z = grad * (onehot(target) - softmax)`, in place.

    `local_targets` (rows,) is each row's target minus the tile's first column; rows whose target lies outside the
    tile have a value outside `[0, cols)`.
    """
    tile.sub_(logsumexp[:, None]).exp_().mul_(-grad[:, None])
    inside = (local_targets >= 0) & (local_targets < tile.shape[1])
    rows = inside.nonzero().view(-1)
    tile.index_put_((rows, local_targets[rows]), grad[rows], accumulate=True)


@dataclass(frozen=True)
class TileOps:
    """The two tile functions a backend provides (`fold_tile`, `head_grad_tile` above are the reference)."""
    fold: Callable[[Tensor, Tensor, Tensor, Tensor | None, Tensor | None], Tensor]
    head_grad: Callable[[Tensor, Tensor, Tensor, Tensor], None]


TORCH_TILES = TileOps(fold=fold_tile, head_grad=head_grad_tile)


def _tile_ops(backend: Backend, hidden: Tensor) -> TileOps:
    """The tiles `backend` names; `auto`: Triton's on a CUDA tensor below fp64 where Triton is installed,
    else torch's."""
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"token_logprobs: backend={backend!r} must be 'auto', 'torch' or 'triton'")
    if backend == "torch" or (backend == "auto" and (hidden.device.type != "cuda" or hidden.dtype == torch.float64
                                                     or importlib.util.find_spec("triton") is None)):
        return TORCH_TILES
    if hidden.dtype == torch.float64:
        raise ValueError("token_logprobs: the Triton kernels compute in fp32; use backend='torch' for fp64 inputs")
    # The one import of the Triton kernels (and so of Triton, an optional extra); a cycle too: they use TileOps.
    from tracec.trace_rl.policy.logprobs_triton import triton_tiles

    return triton_tiles()


# ---------------------------------------------------------------------------------------------------------------
# The walk over row blocks and vocabulary chunks.

def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for fp32, bf16 and fp16 inputs; fp64 inputs (gradient checks) stay fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tile_product(rows: Tensor, weight_chunk: Tensor, out: Tensor) -> Tensor:
    """`rows @ weight_chunk.T` into the buffer `out`, in the compute dtype of `rows` whatever the weight's."""
    return torch.mm(rows, weight_chunk.t().to(rows.dtype), out=out)


def _forward(hidden: Tensor, weight: Tensor, targets: Tensor, inverse_temperature: float, tile_shape: tuple[int, int],
             tiles: TileOps, *, with_entropy: bool, with_hidden_grad: bool) -> tuple[Tensor, ...]:
    """(log-probs, logsumexp, entropy or empty, d logp / d hidden or empty), all in the compute dtype."""
    n, width = hidden.shape
    vocab = weight.shape[0]
    device, dtype = hidden.device, compute_dtype(hidden.dtype)
    floor = torch.finfo(dtype).min  # a finite "minus infinity": (floor - max) * 0 stays 0, unlike -inf * 0
    logprobs = torch.empty(n, dtype=dtype, device=device)
    logsumexp = torch.empty(n, dtype=dtype, device=device)
    entropy = torch.empty(n if with_entropy else 0, dtype=dtype, device=device)
    hidden_grad = torch.empty((n, width) if with_hidden_grad else (0,), dtype=dtype, device=device)
    block, chunk_size = max(1, min(n, tile_shape[0])), tile_shape[1]  # n = 0: no loss token
    tile_buffer = torch.empty(block * min(chunk_size, vocab), dtype=dtype, device=device)
    scratch_buffer = torch.empty_like(tile_buffer) if with_entropy else None
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = hidden[start:stop].to(dtype) * inverse_temperature  # (r, H): z = rows @ W.T
        target_rows = weight[targets[start:stop]].to(dtype)  # (r, H)
        running_max = torch.full((stop - start,), floor, dtype=dtype, device=device)
        sum_exp = torch.zeros_like(running_max)
        sum_exp_shifted = torch.zeros_like(running_max) if with_entropy else None
        expected_weight = torch.zeros_like(rows) if with_hidden_grad else None  # sum exp(z - max) W_v
        for column in range(0, vocab, chunk_size):
            weight_chunk = weight[column:column + chunk_size]
            shape = (stop - start, weight_chunk.shape[0])
            tile = _tile_product(rows, weight_chunk, tile_buffer[:shape[0] * shape[1]].view(shape))
            scratch = None if scratch_buffer is None else scratch_buffer[:tile.numel()].view(shape)
            rescale = tiles.fold(tile, running_max, sum_exp, sum_exp_shifted, scratch)
            if expected_weight is not None:
                expected_weight.mul_(rescale[:, None]).addmm_(tile, weight_chunk.to(dtype))
        log_sum = torch.log(sum_exp)
        logsumexp[start:stop] = running_max + log_sum
        logprobs[start:stop] = (rows * target_rows).sum(dim=1) - logsumexp[start:stop]
        if sum_exp_shifted is not None:
            entropy[start:stop] = log_sum - sum_exp_shifted / sum_exp  # log Z - E[z], both relative to the max
        if expected_weight is not None:
            expected_weight.div_(sum_exp[:, None])
            torch.mul(target_rows.sub_(expected_weight), inverse_temperature, out=hidden_grad[start:stop])
    return logprobs, logsumexp, entropy, hidden_grad


def _head_grad(hidden: Tensor, weight: Tensor, targets: Tensor, logsumexp: Tensor, grad: Tensor,
               inverse_temperature: float, tile_shape: tuple[int, int], tiles: TileOps) -> Tensor:
    """d loss / d weight (V, H) in the compute dtype, recomputing each tile of logits from the saved logsumexp."""
    n = hidden.shape[0]
    vocab = weight.shape[0]
    dtype = logsumexp.dtype
    weight_grad = torch.zeros(weight.shape, dtype=dtype, device=weight.device)
    block, chunk_size = max(1, min(n, tile_shape[0])), tile_shape[1]  # n = 0: no loss token
    tile_buffer = torch.empty(block * min(chunk_size, vocab), dtype=dtype, device=hidden.device)
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = hidden[start:stop].to(dtype) * inverse_temperature
        for column in range(0, vocab, chunk_size):
            weight_chunk = weight[column:column + chunk_size]
            shape = (stop - start, weight_chunk.shape[0])
            tile = _tile_product(rows, weight_chunk, tile_buffer[:shape[0] * shape[1]].view(shape))
            tiles.head_grad(tile, logsumexp[start:stop], grad[start:stop], targets[start:stop] - column)
            weight_grad[column:column + chunk_size].addmm_(tile.t(), rows)  # rows carry the 1/T of dz/dW
    return weight_grad


class _ChunkedTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, inverse_temperature: float,
                tile_shape: tuple[int, int], with_entropy: bool, tiles: TileOps) -> tuple[Tensor, Tensor]:
        logprobs, logsumexp, entropy, hidden_grad = _forward(
            hidden, weight, targets, inverse_temperature, tile_shape, tiles,
            with_entropy=with_entropy, with_hidden_grad=ctx.needs_input_grad[0])
        ctx.save_for_backward(hidden, weight, targets, logsumexp, hidden_grad)
        ctx.inverse_temperature, ctx.tile_shape, ctx.tiles = inverse_temperature, tile_shape, tiles
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _entropy_grad: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, logsumexp, hidden_grad = ctx.saved_tensors
        grad = grad.to(logsumexp.dtype)
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (hidden_grad * grad[:, None]).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = _head_grad(hidden, weight, targets, logsumexp, grad, ctx.inverse_temperature,
                                     ctx.tile_shape, ctx.tiles).to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0,
                   chunk_size: int = 4096, with_entropy: bool = False, rows_per_tile: int = ROWS_PER_TILE,
                   backend: Backend = "auto") -> Tensor | tuple[Tensor, Tensor]:
    """`log_softmax(hidden @ weight.T / temperature).gather(targets)` (N,) fp32, chunked over the vocabulary.

    hidden (N, H) and weight (V, H) of one dtype, targets (N,) integer ids in [0, V). With `with_entropy`, also each
    row's entropy (N,), without gradient. The arithmetic is fp32 for fp32, bf16 and fp16 inputs, and fp64 for fp64
    inputs (exact comparisons, gradient checks), and so are the results. `weight` gets a gradient only if it requires
    one. A tile of logits is `rows_per_tile` x `chunk_size` (vocabulary entries) values. `backend`: "torch"
    (the reference, any device), "triton" (GPU kernels, or Triton's interpreter on CPU with TRITON_INTERPRET=1), or
    "auto" (Triton on CUDA tensors, torch elsewhere).
    """
    _check_arguments(hidden, weight, targets, temperature, (rows_per_tile, chunk_size))
    tiles = _tile_ops(backend, hidden)
    logprobs, entropy = _ChunkedTokenLogprobs.apply(hidden, weight, targets.long(), 1.0 / temperature,
                                                    (rows_per_tile, chunk_size), with_entropy, tiles)
    return (logprobs, entropy) if with_entropy else logprobs


def _check_arguments(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float,
                     tile_shape: tuple[int, int]) -> None:
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"token_logprobs: hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} must be "
                         "(N, H) and (V, H) with the same H")
    if targets.shape != (hidden.shape[0],) or targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise ValueError(f"token_logprobs: targets {tuple(targets.shape)} {targets.dtype} must be ({hidden.shape[0]},) "
                         "integer token ids, one per row of hidden")
    if hidden.dtype != weight.dtype or hidden.device != weight.device or targets.device != hidden.device:
        raise ValueError(f"token_logprobs: hidden ({hidden.dtype}, {hidden.device}), weight ({weight.dtype}, "
                         f"{weight.device}) and targets ({targets.device}) must share dtype and device")
    if not temperature > 0:
        raise ValueError(f"token_logprobs: temperature={temperature!r} must be > 0")
    if min(tile_shape) < 1:
        raise ValueError(f"token_logprobs: rows_per_tile={tile_shape[0]!r} and chunk_size={tile_shape[1]!r} must "
                         "be >= 1")
    if targets.numel() and not (0 <= int(targets.min()) and int(targets.max()) < weight.shape[0]):
        raise ValueError(f"token_logprobs: target ids span [{int(targets.min())}, {int(targets.max())}], outside the "
                         f"vocabulary [0, {weight.shape[0]})")


# ---------------------------------------------------------------------------------------------------------------
# A causal LM over a packed batch.

def sequence_logprobs(model: Any, batch: PackedBatch, *, temperature: float = 1.0, with_entropy: bool = False,
                      chunk_size: int = 4096,
                      backend: Backend = "auto") -> list[Tensor] | tuple[list[Tensor], list[Tensor]]:
    """Per sequence of `batch`, the log-prob (fp32; fp64 for an fp64 model) of each token whose loss mask is true, in
    sequence order.

    Token i is scored under the logits at position i-1 of its own sequence. With `with_entropy`, also the entropy of
    those same distributions. `model` is a transformers causal LM (Llama-like) or a peft model wrapping one.
    """
    _require_packed_masks()
    body, head = decoder_and_head(model)
    device = head.weight.device
    hidden = body(input_ids=batch.input_ids.to(device), position_ids=batch.position_ids.to(device),
                  attention_mask=None, use_cache=False).last_hidden_state  # (rows, T, H)
    scored = hidden.reshape(-1, hidden.shape[-1])[batch.hidden_index.to(device)]  # (n_loss, H)
    result = token_logprobs(scored, head.weight, batch.target_ids.to(device), temperature=temperature,
                            chunk_size=chunk_size, with_entropy=with_entropy, backend=backend)
    if with_entropy:
        logprobs, entropy = result
        return list(logprobs.split(batch.loss_counts)), list(entropy.split(batch.loss_counts))
    assert isinstance(result, Tensor)
    return list(result.split(batch.loss_counts))


def decoder_and_head(model: Any) -> tuple[Any, torch.nn.Linear]:
    """The decoder body (embeddings, layers, final norm) and the plain linear LM head of a causal LM or peft model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wraps the model
    head = base.get_output_embeddings()
    config = base.config
    for option in ("final_logit_softcapping", "logit_scale"):
        if getattr(config, option, None) not in (None, 1.0):
            raise ValueError(f"sequence_logprobs: the model's config sets {option}={getattr(config, option)!r}; "
                             "chunked log-probs support a plain linear head only")
    if type(head) is not torch.nn.Linear:
        raise ValueError(f"sequence_logprobs: the LM head is a {type(head).__name__}, not a plain torch.nn.Linear "
                         "(an adapter on lm_head?); leave lm_head out of the LoRA target modules")
    if head.bias is not None:
        raise ValueError("sequence_logprobs: the LM head has a bias; chunked log-probs support a head without one")
    return base.get_decoder(), head



def _require_packed_masks() -> None:
    try:  # asked when called: the installed transformers decides
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        raise RuntimeError(f"sequence_logprobs needs transformers >= 4.54, which builds block-diagonal masks from "
                           f"position ids (installed: {transformers.__version__}); with an older one packed "
                           "sequences would attend to each other") from None
