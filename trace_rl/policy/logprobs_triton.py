"""Triton kernels for the tile arithmetic of `logprobs.py`: one pass over a logits tile instead of six torch ops.

`logprobs.token_logprobs(..., backend="triton")` keeps its GEMMs (cuBLAS through torch) and its walk over row
blocks and vocabulary chunks, and calls these kernels in place of `fold_tile` and `head_grad_tile`:
- `_fold_kernel`, one program per row: the tile's maximum, then `exp(z - new_max)` written over the tile with the
  sums the online logsumexp (and the entropy) keep, rescaled to the new maximum;
- `_head_grad_kernel`, one program per (row, block of columns): `grad * (onehot(target) - softmax)` in place.
On CPU, Triton's interpreter runs the same kernels (set `TRITON_INTERPRET=1` before this module is first imported:
Triton decides at decoration time); the tests compare them with the torch reference that way, on small shapes.
This module imports Triton at import time and is itself imported only when the Triton backend is asked for.
Left out: a fused GEMM (Triton would have to hold a (rows, H) accumulator in registers; cuBLAS does the products),
and any tuning of the block size on a GPU (none has run these kernels yet: the GPU path is untested).
"""

from __future__ import annotations

import torch
from torch import Tensor
from tracec.trace_rl.policy.logprobs import TileOps

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError("the Triton log-prob kernels need Triton: pip install 'tracec[bench]' (or triton>=3.0)") \
        from error

BLOCK = 1024  # columns a program handles at once
# The kernels' pointer and size parameters carry no annotations: Triton's compiler resolves every annotation as a
# global of this module (`Any` fails on a GPU, while the CPU interpreter never looks).


@triton.jit
def _fold_kernel(tile_ptr, row_stride, n_cols, max_ptr, sum_ptr, shifted_ptr,  # type: ignore[no-untyped-def]
                 rescale_ptr, HAS_ENTROPY: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = tile_ptr + row.to(tl.int64) * row_stride
    old_max = tl.load(max_ptr + row)
    block_max = tl.full([BLOCK_SIZE], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        columns = start + tl.arange(0, BLOCK_SIZE)
        block_max = tl.maximum(block_max, tl.load(row_ptr + columns, mask=columns < n_cols, other=float("-inf")))
    new_max = tl.maximum(old_max, tl.max(block_max, axis=0))
    sums = tl.zeros([BLOCK_SIZE], tl.float32)
    shifted_sums = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        columns = start + tl.arange(0, BLOCK_SIZE)
        inside = columns < n_cols
        shifted = tl.load(row_ptr + columns, mask=inside, other=float("-inf")) - new_max
        exps = tl.exp(shifted)
        tl.store(row_ptr + columns, exps, mask=inside)
        sums += exps
        if HAS_ENTROPY:  # outside the row exps is 0 and shifted -inf: multiply by 0 there, not -inf
            shifted_sums += exps * tl.where(inside, shifted, 0.0)
    rescale = tl.exp(old_max - new_max)
    old_sum = tl.load(sum_ptr + row)
    tl.store(sum_ptr + row, old_sum * rescale + tl.sum(sums, axis=0))
    if HAS_ENTROPY:
        old_shifted = tl.load(shifted_ptr + row)
        tl.store(shifted_ptr + row,
                 (old_shifted + (old_max - new_max) * old_sum) * rescale + tl.sum(shifted_sums, axis=0))
    tl.store(max_ptr + row, new_max)
    tl.store(rescale_ptr + row, rescale)


@triton.jit
def _head_grad_kernel(tile_ptr, row_stride, n_cols, logsumexp_ptr, grad_ptr,  # type: ignore[no-untyped-def]
                      targets_ptr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    columns = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = columns < n_cols
    row_ptr = tile_ptr + row.to(tl.int64) * row_stride
    logits = tl.load(row_ptr + columns, mask=inside, other=0.0)
    grad = tl.load(grad_ptr + row)
    target = tl.load(targets_ptr + row)
    probabilities = tl.exp(logits - tl.load(logsumexp_ptr + row))
    onehot = tl.where(columns == target, 1.0, 0.0)
    tl.store(row_ptr + columns, grad * (onehot - probabilities), mask=inside)


def fold_tile(tile: Tensor, running_max: Tensor, sum_exp: Tensor, sum_exp_shifted: Tensor | None,
              scratch: Tensor | None) -> Tensor:
    """`logprobs.fold_tile` as one kernel launch (`scratch` is not needed)."""
    rows, cols = tile.shape
    rescale = torch.empty_like(running_max)
    shifted = sum_exp if sum_exp_shifted is None else sum_exp_shifted  # unused without entropy
    _fold_kernel[(rows,)](tile, tile.stride(0), cols, running_max, sum_exp, shifted, rescale,
                          HAS_ENTROPY=sum_exp_shifted is not None, BLOCK_SIZE=BLOCK)
    return rescale


def head_grad_tile(tile: Tensor, logsumexp: Tensor, grad: Tensor, local_targets: Tensor) -> None:
    """`logprobs.head_grad_tile` as one kernel launch."""
    rows, cols = tile.shape
    _head_grad_kernel[(rows, triton.cdiv(cols, BLOCK))](tile, tile.stride(0), cols, logsumexp, grad.contiguous(),
                                                        local_targets.contiguous(), BLOCK_SIZE=BLOCK)


def triton_tiles() -> TileOps:
    return TileOps(fold=fold_tile, head_grad=head_grad_tile)
