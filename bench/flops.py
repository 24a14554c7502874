"""FLOP counts of a GRPO iteration's work on a Llama-style model with LoRA, for a floor: FLOPs / the matmul rate.

Only matrix products count (2 FLOPs a multiply-add): they are all but all of a transformer's arithmetic, and the
rate a count is divided by (`floors.matmul_rate`) is a matrix product's. Norms, activations, rotary embeddings,
softmax, sampling and the optimizer step are left out: they cost time, not FLOPs worth counting, and their time is
part of what a side's seconds over its floor show. A count is of the useful work, the least any implementation must
multiply for it:

- Forward, per token and layer: each projection once, 2 x in x out for q, k, v, o, gate, up and down (the layers'
  weights N give 2N a token); an adapted projection adds its LoRA branch x -> A -> B, 2 r (in + out). The embedding
  is a lookup. Attention costs 4 x heads x head_dim per (query, key) pair and layer (2 x head_dim for the score, 2 x
  head_dim for the weighted value, per query head: grouped keys are shared, not multiplied less); a sequence of L
  tokens attending causally has L (L + 1) / 2 pairs. The LM head is 2 x hidden x vocab per position whose logits
  are needed.
- Backward, the base weights frozen (LoRA): a frozen projection gets no weight gradient, only its input gradient,
  2 x in x out a token like its forward, except where its input needs none: the first layer's q, k and v read the
  frozen embeddings (through a frozen norm), so nothing flows below them. A LoRA branch's backward is twice its
  forward: the gradients of B (2 r out) and A (2 r in), the gradient into the branch's middle (2 r out) and out of
  it into the input (2 r in; again not at the first layer's q, k, v). Attention's backward is twice its forward
  (dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q). The frozen LM head (tied to the embeddings in SmolLM2) passes
  only the gradient of its scored rows' hidden states, 2 x hidden x vocab a row.

The phases (`generation_flops`, `learning_flops`):
- generation, with the adapter merged into the base weights (as ours decodes; the merge itself, 2 r x in x out a
  projection once an iteration, is left out): a sequence of P prompt tokens and C sampled ones runs P + C - 1
  tokens through the model (the last sampled token is never fed back), attending causally, and the head over C
  positions (the last prompt position's and each decoded token's). A finished row that keeps its place in a batch
  until the longest is done, and padding, do no useful work and are not counted.
- learning, one epoch: a forward and a backward over every token of every sequence (prompt and completion, the
  LoRA branches included), causal attention within each sequence, and the head over its loss positions only (the
  completion tokens, as ours scores them).
`forward_flops` and `backward_flops` take the attention pairs as given, so a count can also be of what an
implementation executes (a padded or packed row's full square of pairs, as eager attention multiplies them): the
test checks them so against torch's own FLOP counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FIRST_LAYER_QKV = ("q_proj", "k_proj", "v_proj")  # read the frozen embeddings: no input gradient below them


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What the counts need of a Llama-style decoder and its LoRA adapter (rank 0: none, or merged)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    lora_rank: int = 0
    lora_modules: tuple[str, ...] = ()

    @staticmethod
    def of(config: Any, lora_rank: int = 0, lora_modules: Sequence[str] = ()) -> ModelShape:
        """From a transformers config (LlamaConfig and its kin)."""
        heads = int(config.num_attention_heads)
        return ModelShape(layers=int(config.num_hidden_layers), hidden=int(config.hidden_size),
                          intermediate=int(config.intermediate_size), heads=heads,
                          kv_heads=int(config.num_key_value_heads),
                          head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
                          vocab=int(config.vocab_size), lora_rank=lora_rank, lora_modules=tuple(lora_modules))

    def merged(self) -> ModelShape:
        """The same model with its adapter merged into the base weights."""
        return ModelShape(layers=self.layers, hidden=self.hidden, intermediate=self.intermediate, heads=self.heads,
                          kv_heads=self.kv_heads, head_dim=self.head_dim, vocab=self.vocab)

    def projections(self) -> dict[str, tuple[int, int]]:
        """Each layer's projections: (in, out) features."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def matmul_weights(self) -> int:
        """Weights a token is multiplied by in one layer, adapter aside (N / layers)."""
        return sum(a * b for a, b in self.projections().values())

    def lora(self, name: str) -> tuple[int, int]:
        """A projection's LoRA branch per token and layer: (FLOPs through A, through B), zero where not adapted."""
        if name not in self.lora_modules:
            return 0, 0
        features_in, features_out = self.projections()[name]
        return 2 * self.lora_rank * features_in, 2 * self.lora_rank * features_out


def causal_pairs(length: int) -> int:
    """(query, key) pairs of causal attention within a sequence of `length` tokens."""
    return length * (length + 1) // 2


def forward_flops(shape: ModelShape, *, tokens: int, pairs: int, head_rows: int) -> int:
    """A forward of `tokens` tokens with `pairs` attention pairs (in each layer) and the LM head over `head_rows`."""
    branches = sum(sum(shape.lora(name)) for name in shape.projections())
    per_token = shape.layers * (2 * shape.matmul_weights() + branches)
    attention = shape.layers * 4 * shape.heads * shape.head_dim * pairs
    return tokens * per_token + attention + 2 * shape.hidden * shape.vocab * head_rows


def backward_flops(shape: ModelShape, *, tokens: int, pairs: int, head_rows: int) -> int:
    """The backward of `forward_flops`' forward, base weights frozen and the adapter trained (see the module)."""
    projections = shape.projections()
    per_layer = 2 * shape.matmul_weights() + sum(2 * sum(shape.lora(name)) for name in projections)
    # the first layer's q, k, v: no input gradient through the base weight (2 in out) nor out of A (2 r in)
    skipped = sum(2 * projections[name][0] * projections[name][1] + shape.lora(name)[0] for name in FIRST_LAYER_QKV)
    attention = shape.layers * 2 * 4 * shape.heads * shape.head_dim * pairs
    return tokens * (shape.layers * per_layer - skipped) + attention + 2 * shape.hidden * shape.vocab * head_rows


def generation_flops(shape: ModelShape, prompts: Sequence[int], completions: Sequence[int]) -> int:
    """Sampling `completions[i]` tokens after `prompts[i]` ones, with a KV cache and the adapter merged."""
    merged = shape.merged()
    return sum(forward_flops(merged, tokens=p + c - 1, pairs=causal_pairs(p + c - 1), head_rows=c)
               for p, c in zip(prompts, completions, strict=True))


def learning_flops(shape: ModelShape, lengths: Sequence[int], loss_tokens: Sequence[int]) -> tuple[int, int]:
    """(forward, backward) FLOPs of one epoch over sequences of `lengths` tokens with `loss_tokens` scored each."""
    tokens, pairs, rows = sum(lengths), sum(causal_pairs(n) for n in lengths), sum(loss_tokens)
    return (forward_flops(shape, tokens=tokens, pairs=pairs, head_rows=rows),
            backward_flops(shape, tokens=tokens, pairs=pairs, head_rows=rows))
