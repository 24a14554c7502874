"""A tiny randomly initialised chat model built in code: the real model path, end to end, with no file or hub.

`build_tiny_model(seed)` gives a 2-layer Llama (hidden 64, 4 heads, about 100k parameters) and a character-level
tokenizer made with the `tokenizers` library: one token per printable ASCII character but the backslash, tab and
newline (anything else reads as `<|unk|>`), plus the special tokens of the fallback chat template (`<|system|>`,
`<|user|>`, `<|assistant|>`, `<|tool|>`) and `<|eos|>` / `<|pad|>`. Only printable text can come out, so random
replies are safe to hand to a game engine: TextWorld's Z-machine hangs on a NUL and crashes on `\\D` (a dumb-frotz
escape). It has no chat template, so `TransformersBackend` uses its fallback.
For tests and the demo only: random weights write random text; what it proves is that rendering, truncation,
sampling, saving and loading work on a genuine `transformers` model. Save it with
`TransformersBackend.save_pretrained` and load it with `TransformersBackend.from_pretrained`.
What it holds (its vocabulary, `parameter_count()`) is `trace_rl.policy.tiny_vocab`, which imports no torch.
Left out: any training (the trainer fine-tunes whatever model it is given).
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models
from tracec.trace_rl.policy.tiny_vocab import CHARACTERS, EOS, PAD, SPECIAL_TOKENS, UNK
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def build_tokenizer(*, max_positions: int = 1024) -> Any:
    """A character-level tokenizer: ids 0..6 are `SPECIAL_TOKENS`, then one id per character of `CHARACTERS`."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    # BPE without merges splits the text into single characters; Fuse joins them back without spaces.
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=PAD, unk_token=UNK,
                                   model_max_length=max_positions)


def build_tiny_model(seed: int = 0, *, layers: int = 2, hidden: int = 64, heads: int = 4,
                     max_positions: int = 1024) -> tuple[Any, Any]:
    """A randomly initialised Llama and its tokenizer, in eval mode; the same seed gives the same weights."""
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"build_tiny_model: hidden={hidden} must split into heads={heads} of an even size "
                         "(rotary embeddings rotate pairs); try hidden=64, heads=4")
    tokenizer = build_tokenizer(max_positions=max_positions)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):  # seeds the weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval(), tokenizer

