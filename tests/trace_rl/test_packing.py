"""Packed sequences: the layout `pack_sequences` builds, and a causal LM run on it through `sequence_logprobs`.

Packed log-probs equal those of each sequence run alone (the tiny Llama, a peft LoRA wrapping it, and SmolLM2),
and no sequence sees another: changing a token of one changes nothing in its row neighbour, while the two ways
of breaking the block-diagonal mask (an all-ones attention mask, a KV cache) are shown to break that check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import float64_model, forward_roundings, forward_size, tolerance
from tracec.trace_rl.policy.logprobs import decoder_and_head, sequence_logprobs
from tracec.trace_rl.policy.packing import PackedBatch, pack_sequences
from tracec.trace_rl.policy.tiny import build_tiny_model

sequences_and_masks = st.lists(
    st.integers(1, 24).flatmap(lambda length: st.tuples(
        st.lists(st.integers(0, 90), min_size=length, max_size=length),
        st.lists(st.booleans(), min_size=length, max_size=length).map(lambda mask: [False, *mask[1:]]))),
    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(items=sequences_and_masks, spare=st.integers(0, 30))
def test_pack_lays_each_sequence_whole_with_its_own_positions(items: list[tuple[list[int], list[bool]]],
                                                             spare: int) -> None:
    sequences, masks = [tokens for tokens, _ in items], [mask for _, mask in items]
    capacity = max(len(tokens) for tokens in sequences) + spare
    batch = pack_sequences(sequences, masks, max_tokens_per_row=capacity, pad_id=99)
    covered = torch.zeros(batch.input_ids.shape, dtype=torch.bool)
    for tokens, row, start, length in zip(sequences, batch.sequence_rows, batch.sequence_starts,
                                          batch.sequence_lengths, strict=True):
        assert length == len(tokens)
        assert batch.input_ids[row, start:start + length].tolist() == tokens
        assert batch.position_ids[row, start:start + length].tolist() == list(range(length))
        assert not covered[row, start:start + length].any()  # no overlap
        covered[row, start:start + length] = True
    fills = covered.sum(dim=1)
    assert fills.max() == batch.row_length <= capacity  # rows as wide as the fullest, no wider
    for row, fill in enumerate(fills.tolist()):  # the padding tail: its own run of positions, after the tokens
        assert covered[row, :fill].all()
        assert batch.position_ids[row, fill:].tolist() == list(range(batch.row_length - fill))
    assert int((fills <= capacity / 2).sum()) <= 1  # first fit: two half-empty rows would have been one
    # Each loss token is predicted by the position before it, inside its own sequence.
    expected_targets = [tokens[i] for tokens, mask in items for i in range(len(tokens)) if mask[i]]
    assert batch.target_ids.tolist() == expected_targets
    assert batch.loss_counts == tuple(sum(mask) for mask in masks)
    flat_ids, flat_positions = batch.input_ids.view(-1), batch.position_ids.view(-1)
    assert torch.equal(flat_ids[batch.hidden_index + 1], batch.target_ids)
    assert bool((flat_positions[batch.hidden_index + 1] >= 1).all())


@pytest.mark.parametrize(("sequences", "masks", "message"), [
    ([[1, 2]], [[False, True]], None),
    ([[1, 2, 3]], [[True, False, False]], "sequence 0 has a loss on its first token"),
    ([[1], [1, 2, 3, 4, 5]], [[False], [False] * 5], "sequence 1 has 5 tokens, more than max_tokens_per_row=4"),
    ([[1, 2]], [[False]], "sequence 0 has 2 tokens but a loss mask of 1"),
    ([[1], []], [[False], []], "sequence 1 is empty"),
    ([], [], "no sequences"),
    ([[1, -2]], [[False, False]], "negative token id -2"),
])
def test_pack_names_the_bad_sequence(sequences: list[list[int]], masks: list[list[bool]],
                                     message: str | None) -> None:
    if message is None:
        assert pack_sequences(sequences, masks, max_tokens_per_row=4).rows == 1
    else:
        with pytest.raises(ValueError, match=message):
            pack_sequences(sequences, masks, max_tokens_per_row=4)


# ---------------------------------------------------------------------------------------------------------------
# Packed against one sequence at a time, on real transformers models.

def one_at_a_time(model: Any, sequences: list[list[int]], masks: list[list[bool]],
                  temperature: float = 1.0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The plain reference: each sequence alone through the full model, all logits, log_softmax, gather."""
    logprobs, entropies = [], []
    for tokens, mask in zip(sequences, masks, strict=True):
        logits = model(input_ids=torch.tensor([tokens])).logits[0].double() / temperature
        logp = torch.log_softmax(logits, dim=-1)
        scored = torch.tensor(mask).nonzero().view(-1)
        logprobs.append(logp[scored - 1, torch.tensor(tokens)[scored]])
        entropies.append(-(logp.exp() * logp).sum(-1)[scored - 1])
    return logprobs, entropies


def random_sequences(seed: int, count: int, vocab: int, longest: int) -> tuple[list[list[int]], list[list[bool]]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, longest + 1, (count,), generator=generator).tolist()
    sequences = [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]
    masks = [[False, *(torch.rand(n - 1, generator=generator) < 0.6).tolist()] for n in lengths]
    return sequences, masks


def assert_packed_equals_alone(model: Any, sequences: list[list[int]], masks: list[list[bool]], capacity: int,
                               temperature: float = 1.0) -> PackedBatch:
    """Log-probs and entropies within the rule's bound (tests/numerics.py) for a forward over `capacity` positions
    in the model's dtype, at the size of the forward's values and of those; fp64 models only (`float64_model`): in
    fp32 the bound would be ~1e-3, no finer than the leak it is meant to catch."""
    dtype = next(model.parameters()).dtype
    assert dtype == torch.float64
    batch = pack_sequences(sequences, masks, max_tokens_per_row=capacity)
    assert batch.rows < len(sequences)  # several sequences share a row
    with torch.no_grad():
        packed, packed_entropy = sequence_logprobs(model, batch, temperature=temperature, with_entropy=True)
        alone, alone_entropy = one_at_a_time(model, sequences, masks, temperature)
    size = max(*(forward_size(model, torch.tensor([tokens])) for tokens in sequences),
               *(float(values.abs().max()) for values in alone + alone_entropy if len(values)))
    close = tolerance(forward_roundings(model.config, capacity), size, dtype)
    for ours, theirs in zip(packed + packed_entropy, alone + alone_entropy, strict=True):
        torch.testing.assert_close(ours.double(), theirs, atol=close, rtol=0.0)
    return batch


@pytest.fixture(scope="module")
def tiny() -> Any:
    model, _ = build_tiny_model(seed=3)
    return float64_model(model)  # packed and lone forwards sum in other orders: in fp64 they agree to ~1e-14


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_packed_equals_alone_for_the_tiny_llama(tiny: Any, temperature: float) -> None:
    sequences, masks = random_sequences(0, 9, tiny.config.vocab_size, 40)
    assert_packed_equals_alone(tiny, sequences, masks, capacity=96, temperature=temperature)


def test_packed_gradients_equal_the_sum_of_lone_gradients(tiny: Any) -> None:
    """Backward through the packed batch moves every weight as the lone sequences together do."""
    sequences, masks = random_sequences(1, 6, tiny.config.vocab_size, 30)
    weights = torch.randn(sum(sum(mask) for mask in masks), generator=torch.Generator().manual_seed(0))
    parameters = [p for p in tiny.parameters() if p.requires_grad]
    batch = pack_sequences(sequences, masks, max_tokens_per_row=64)
    packed = torch.autograd.grad((torch.cat(sequence_logprobs(tiny, batch)) * weights).sum(), parameters)
    lone = torch.cat(one_at_a_time(tiny, sequences, masks)[0]) * weights
    by_token = torch.autograd.grad(lone, parameters, torch.eye(len(lone), dtype=lone.dtype), is_grads_batched=True)
    alone = [g.sum(dim=0) for g in by_token]
    sizes = [g.abs().sum(dim=0) for g in by_token]  # what each entry's sum accumulates
    # the rule (tests/numerics.py): a backward is as long a chain as the forward, relative to each token's share
    size = max(forward_size(tiny, torch.tensor([tokens])) for tokens in sequences)
    relative = tolerance(2 * forward_roundings(tiny.config, 64), size, torch.float64)
    for ours, theirs, size in zip(packed, alone, sizes, strict=True):
        assert ((ours - theirs).abs() <= relative * size).all()


def lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        init_lora_weights=False)  # random B: the adapter changes the outputs
    return get_peft_model(model, config)


def test_packed_equals_alone_through_a_lora_adapter_and_only_lora_weights_get_gradients() -> None:
    base, _ = build_tiny_model(seed=4)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = float64_model(lora(base))
    sequences, masks = random_sequences(2, 7, base.config.vocab_size, 40)
    assert_packed_equals_alone(model, sequences, masks, capacity=90)
    with model.disable_adapter():  # the adapter matters: without it the log-probs differ
        plain = torch.cat(sequence_logprobs(model, pack_sequences(sequences, masks, max_tokens_per_row=90)))
    adapted = torch.cat(sequence_logprobs(model, pack_sequences(sequences, masks, max_tokens_per_row=90)))
    assert (plain - adapted).abs().max() > 1e-3
    adapted.sum().backward()
    moved = {name for name, p in model.named_parameters() if p.grad is not None}
    assert moved and all("lora_" in name for name in moved)
    assert decoder_and_head(model)[1].weight.grad is None  # the tied, frozen head


@pytest.mark.slow
def test_packed_equals_alone_for_smollm2() -> None:
    """In fp64 (`float64_model`) the packed and lone runs agree to fp64 rounding, with and without an adapter.

    fp32 cannot be checked to a bound that means anything here: the attention over a packed row sums in another
    order than over a lone sequence, and the rule's bound for 30 layers is ~1 (the differences seen: ~5e-5 on
    log-probs near -20). A plain `model.double()` is not all fp64: transformers' Llama RMSNorm rounds its input to
    fp32, so a 1e-16 difference in attention can flip an fp32 rounding there (measured with transformers 5.24: up
    to 2.3e-6 on log-probs near -15); `float64_model` makes the norms fp64. A leak between sequences moves the
    log-probs by far more (see the neighbour tests below).
    """
    from tracec.trace_rl.policy.catalog import SMOLLM2, resolve_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model(SMOLLM2), dtype=torch.float32).eval()
    sequences, masks = random_sequences(3, 5, model.config.vocab_size, 48)
    float64_model(model)
    assert_packed_equals_alone(model, sequences, masks, capacity=100)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        adapted = lora(model)
    assert next(p for n, p in adapted.named_parameters() if "lora_" in n).dtype == torch.float64
    assert_packed_equals_alone(adapted, sequences, masks, capacity=100)


# ---------------------------------------------------------------------------------------------------------------
# Sequences must not mix.

@contextlib.contextmanager
def forced_decoder_arguments(model: Any, **forced: Any) -> Iterator[None]:
    """Run the model's decoder with some keyword arguments overridden: the ways a packed forward goes wrong."""
    body, _ = decoder_and_head(model)
    original = body.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        kwargs.update({k: v(kwargs) if callable(v) else v for k, v in forced.items()})
        return original(*args, **kwargs)

    body.forward = forward
    try:
        yield
    finally:
        del body.forward


def neighbour_change(model: Any) -> float:
    """How much B's log-probs move when one token of A, packed before B in the same row, changes."""
    first = [[5, 17, 23, 42, 8, 31, 12, 60], [9, 44, 3, 70, 21]]  # A longer than B: packed first
    second = [[5, 17, 23, 11, 8, 31, 12, 60], first[1]]
    masks = [[False] + [True] * 7, [False] + [True] * 4]
    batches = [pack_sequences(s, masks, max_tokens_per_row=16) for s in (first, second)]
    assert batches[0].sequence_rows == (0, 0) and batches[0].sequence_starts == (0, 8)
    with torch.no_grad():
        (a1, b1), (a2, b2) = (sequence_logprobs(model, batch) for batch in batches)
    assert (a1 - a2).abs().max() > 1e-3  # the change is visible where it should be
    return float((b1 - b2).abs().max())


def test_a_token_of_one_sequence_changes_nothing_in_its_neighbour(tiny: Any) -> None:
    assert neighbour_change(tiny) == 0.0


@pytest.mark.parametrize("broken", [
    {"attention_mask": lambda kwargs: torch.ones_like(kwargs["input_ids"])},  # all ones: one causal block per row
    {"use_cache": True},  # with a cache transformers skips the packed-sequence detection
])
def test_the_neighbour_check_catches_a_mask_that_lets_sequences_mix(tiny: Any, broken: dict[str, Any]) -> None:
    with forced_decoder_arguments(tiny, **broken):
        assert neighbour_change(tiny) > 1e-3


def test_a_transformers_without_packed_masks_is_refused(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Older transformers ignore the restarts in the position ids; refusing beats mixing sequences silently."""
    import transformers.masking_utils

    monkeypatch.delattr(transformers.masking_utils, "find_packed_sequence_indices")
    batch = pack_sequences([[1, 2, 3]], [[False, True, True]], max_tokens_per_row=8)
    with pytest.raises(RuntimeError, match=r"needs transformers >= 4.54"):
        sequence_logprobs(tiny, batch)
