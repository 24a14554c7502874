"""Tolerances that follow the arithmetic, so that a comparison of float results holds on any CPU.

A float result carries rounding, and how much depends on the order of its sums: matmul kernels, their blocking and
the thread count choose that order, differently on each CPU. A tolerance read off one machine's differences is a
coin toss on the next; a tolerance derived from what is computed holds on every machine. The rule:

    unit_roundoff(dtype)                   u: 2^-24 for fp32, 2^-53 for fp64 (2^-8 bf16, 2^-11 fp16)
    rounding_error(n, m, dtype)            n * m * u: the worst case of one evaluation
    tolerance(n, m, dtype)                 2 * n * m * u: two evaluations of one value, each in its own order
                                           (or one against a reference computed in as fine a dtype or finer)
    forward_roundings(config, length)      the n of one output of a transformer's forward
    forward_size(model, input_ids)         its m: the largest hidden state or logit
    standardized_tolerance(values, eps)    the bound for (x - mean) / (std + eps) over a group, in fp64
    float64_model(model)                   a transformers model in fp64 through and through, for comparisons

n counts the roundings that reach the result: the terms of every sum it accumulates, plus one for each elementwise
operation or conversion on the way (exp and log: 2, libm's are within an ulp or two). m bounds the magnitude of the
values those roundings happen at; for a sum, the sum of its terms' absolute values (which bounds every partial sum,
so cancellation is covered). The bound is the worst case to first order in u (Higham, "Accuracy and Stability of
Numerical Algorithms", 2nd ed., eq. (4.4): a sum of n terms in any order is off by at most (n - 1) u times its
largest partial sum), not a probabilistic one: it holds whatever order a kernel picks. With m = 1 it is a relative
bound: an rtol, or a factor for sizes computed beside the values (`|B| @ |A|` for `B @ A`).

A network's forward is not one sum: its roundings pass through normalizations and softmaxes, which carry a relative
error through about unchanged. `forward_roundings` counts the terms of the sums on the longest chain from the input
to one output, and `forward_size` takes m as the largest value on the way (the residual stream, which large
adapters grow to ~100 while the logits stay ~1) or at the end; that is a model of the propagation, not a proof, so
compare forwards in float64 (`float64_model`), where the bound is ~1e-10 for the tiny model (~1e-6 for SmolLM2's
30 layers): hundreds of times above the differences any order gives, and far below what a masking error makes.
Left out: bounds for iterative solvers (SVD, eigenvalues), whose error follows their condition number.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

# Significand bits, the implicit one included: u = 2^-bits is half the gap between 1 and the next float.
_SIGNIFICAND_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def unit_roundoff(dtype: Any) -> float:
    """u of a torch or numpy dtype (or `float`): any result of one rounding is within a factor (1 +- u) of exact."""
    text = str(dtype)
    name = text.removeprefix("torch.") if text.startswith("torch.") else str(np.dtype(dtype))
    if name not in _SIGNIFICAND_BITS:
        raise ValueError(f"unit_roundoff: {dtype} is not a float dtype: use one of {sorted(_SIGNIFICAND_BITS)}")
    return 2.0 ** -_SIGNIFICAND_BITS[name]


def rounding_error(roundings: int, magnitude: float, dtype: Any) -> float:
    """The worst-case rounding error of one evaluation: `roundings` roundings at values of size <= `magnitude`."""
    return roundings * magnitude * unit_roundoff(dtype)


def tolerance(roundings: int, magnitude: float, dtype: Any) -> float:
    """How far two evaluations of one value in `dtype` may differ: each is within `rounding_error` of the exact
    value. Against a reference in a finer dtype the bound holds too (the reference's own error is smaller)."""
    return 2 * rounding_error(roundings, magnitude, dtype)


def standardized_tolerance(values: Any, eps: float, *, input_error: float = 0.0, divide: bool = True) -> float:
    """How far two fp64 computations of (x - mean) / (std + eps) over one group of `values` may differ, each value
    off by at most `input_error`: a deviation x - mean carries two input errors and the mean's n + 1 roundings at
    the values' size; the std as much again, plus its own n + 2 roundings relative to itself; the quotient carries
    both through 1 / (std + eps), the std's scaled by the largest |quotient|. Without `divide`, the deviation's.
    Values beyond 2^480 are scaled by 2^-600 first (exact), as `tracec.runtime.rewards.advantages` does."""
    x = np.asarray(values, dtype=np.float64)
    scale = 2.0 ** -600 if np.abs(x).max() > 2.0 ** 480 else 1.0
    x, eps, input_error = x * scale, eps * scale, input_error * scale
    n, size, std = len(x), max(1.0, float(np.abs(x).max())), float(x.std())
    deviation = 2 * input_error + tolerance(n + 1, size, np.float64)
    if not divide:
        return deviation / scale
    quotient = float(np.abs(x - x.mean()).max()) / (std + eps)
    return (1 + quotient) * (deviation / (std + eps) + tolerance(n + 2, 1.0, np.float64))


def forward_roundings(config: Any, length: int) -> int:
    """n for one output of a decoder-only transformer (a transformers config, Llama's field names) over `length`
    positions. The longest chain, per layer: the norm, a q, k or v projection, the attention score, its softmax and
    the mix of values over the positions, the output projection, the second norm, the gate and down projections,
    and ~8 elementwise steps (rotary, activation, residual adds); then the final norm, the head, and a log-softmax
    over the vocabulary. A projection is counted twice, so that adapters (A, then B, of rank <= width) are in."""
    width, inner = int(config.hidden_size), int(config.intermediate_size)
    head = width // int(config.num_attention_heads)
    projections = 2 * (width + width + width + inner)  # in (q, k or v), out, gate: from width; down: from inner
    layer = width + head + 2 * length + width + projections + 8
    return int(config.num_hidden_layers) * layer + width + width + int(config.vocab_size)


def forward_size(model: Any, input_ids: Any) -> float:
    """m for a forward of `model` (a transformers causal LM) over `input_ids` (1, T): the largest |value| among its
    hidden states (the embeddings, each layer's residual stream, the final norm's output) and its logits, at least 1.
    A caller whose outputs are larger (log-probs of a wide vocabulary) takes the larger of the two."""
    import torch

    with torch.no_grad():
        out = model(input_ids=input_ids, output_hidden_states=True)
    return max(1.0, float(out.logits.abs().max()), *(float(h.abs().max()) for h in out.hidden_states))


def float64_model(model: Any) -> Any:
    """`model` (a transformers model, or peft around one) cast to fp64 in place, its RMSNorms computing in fp64.

    transformers' RMSNorm (Llama's and its kin) rounds its input to fp32 whatever the model's dtype. Two forwards
    that differ by fp64 rounding then round to the same fp32 values but now and then one that straddles a rounding
    boundary (~1e-9 a value), and their outputs part by ~1e-7: a rare, CPU-dependent failure for a tight fp64 check.
    The rotary embedding's fp32 angles stay: they are the same wherever the positions are the same."""
    import torch

    def forward(norm: Any, hidden: torch.Tensor) -> torch.Tensor:
        return norm.weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))

    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon")]
    if not norms:
        raise ValueError(f"float64_model: no RMSNorm with `variance_epsilon` in {type(model).__name__}")
    for norm in norms:
        norm.forward = types.MethodType(forward, norm)
    return model.double()
