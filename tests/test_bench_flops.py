"""bench/flops.py against torch's own FLOP counter, on a random-init model of SmolLM2-135M's shape cut to two layers.

Eager attention multiplies every (query, key) pair of a row, masked or not, so each case passes the pairs it
executes; the per-token, per-pair and per-head-row coefficients, the LoRA branches' backward and the first layer's
skipped input gradients are what is checked. The learning case runs ours' packed kernel (`sequence_logprobs`), whose
LM head computes its hidden-state gradient in the forward: only the forward + backward total is compared.
"""

from __future__ import annotations

from collections.abc import Callable

import peft
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from bench.flops import ModelShape, backward_flops, causal_pairs, forward_flops, generation_flops, learning_flops

LORA = ("q_proj", "k_proj", "v_proj", "o_proj")


def smollm2_shaped(layers: int = 2) -> torch.nn.Module:
    config = transformers.LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def counted(run: Callable[[], object]) -> int:
    """FLOPs torch counts in `run`, the in-place `addmm_` included (left out by default; ours' LM head accumulates
    its expected embedding row, the hidden-state gradient, with it)."""
    def addmm(_: torch.Size, a: torch.Size, b: torch.Size, *args: object, **kwargs: object) -> int:
        return 2 * a[0] * a[1] * b[1]

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.addmm_: addmm}) as counter:
        run()
    return int(counter.get_total_flops())


def test_forward_of_the_base_model_with_every_position_scored() -> None:
    model = smollm2_shaped()
    ids = torch.randint(0, 49152, (2, 24))
    shape = ModelShape.of(model.config)
    with torch.no_grad():
        flops = counted(lambda: model(input_ids=ids))
    assert flops == pytest.approx(forward_flops(shape, tokens=48, pairs=2 * 24 * 24, head_rows=48), rel=0.01)


def test_generation_prefill_then_decode_with_a_cache() -> None:
    model, prompt, new = smollm2_shaped(), 20, 6
    shape = ModelShape.of(model.config)

    def generate() -> None:
        cache = transformers.DynamicCache()
        token = model(input_ids=torch.randint(0, 49152, (1, prompt)), cache=cache, use_cache=True,
                      logits_to_keep=1).logits[:, -1:].argmax(-1)
        for _ in range(new - 1):
            token = model(input_ids=token, cache=cache, use_cache=True).logits.argmax(-1)

    with torch.no_grad():
        flops = counted(generate)
    executed = prompt * prompt + sum(prompt + step + 1 for step in range(new - 1))  # eager prefill: the full square
    expected = forward_flops(shape, tokens=prompt + new - 1, pairs=executed, head_rows=new)
    assert flops == pytest.approx(expected, rel=0.01)
    causal = causal_pairs(prompt + new - 1) - executed  # the floor counts the prefill's causal half only
    assert generation_flops(shape, [prompt], [new]) == expected + 4 * shape.layers * shape.heads * 64 * causal


def test_learning_forward_and_backward_of_a_lora_model_scoring_completion_tokens_only() -> None:
    from tracec.trace_rl.policy.logprobs import sequence_logprobs
    from tracec.trace_rl.policy.packing import pack_sequences

    model = peft.get_peft_model(smollm2_shaped(), peft.LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0,
                                                                   target_modules=list(LORA)))
    lengths, prompts = [30, 22], [12, 15]
    generator = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 49152, (n,), generator=generator).tolist() for n in lengths]
    masks = [[i >= p for i in range(n)] for n, p in zip(lengths, prompts, strict=True)]
    batch = pack_sequences(ids, masks, max_tokens_per_row=64, pad_id=0)  # one row of 52 tokens
    loss_tokens = [n - p for n, p in zip(lengths, prompts, strict=True)]

    def learn() -> None:
        torch.cat(sequence_logprobs(model, batch)).sum().backward()  # type: ignore[arg-type]

    flops = counted(learn)
    shape = ModelShape.of(model.config, 16, LORA)
    executed = {"tokens": sum(lengths), "pairs": batch.row_length ** 2, "head_rows": sum(loss_tokens)}
    assert flops == pytest.approx(forward_flops(shape, **executed) + backward_flops(shape, **executed), rel=0.01)
    forward, backward = learning_flops(shape, lengths, loss_tokens)
    assert forward == forward_flops(shape, tokens=52, pairs=causal_pairs(30) + causal_pairs(22), head_rows=25)
    assert backward == backward_flops(shape, tokens=52, pairs=causal_pairs(30) + causal_pairs(22), head_rows=25)
