"""A small policy built locally: a Llama made from a config, with a word-level tokenizer of a game family's words.

    texts = vocabulary_texts(family, train_games)        # the generator's grammar + what the training games show
    folder = build_small_policy(texts, out / "small-policy", hidden=64, layers=2)
    policy = Policy.load(str(folder), lora)              # the trainer loads it like any checkpoint folder

Why: SmolLM2 on a 2-core CPU affords about a hundred episodes in ten minutes; a model of ~0.5M parameters over a
vocabulary of game words affords thousands, which is what a learning curve needs. It starts from random weights, so
it knows nothing: what it learns, it learns from the rewards.

The tokenizer (`tokenizers`, saved as a `transformers` fast tokenizer) lowercases, then splits text into words and
punctuation, a word carrying a leading `▁` when a space precedes it (SentencePiece's convention), so decoding is
exact: `decode(encode(text)) == text.lower()` for text of known words with single spaces. `<action>`, `</action>`
and the newline are whole tokens, and so are the chat roles of the fallback template (`<|user|>`, ...), which the
trainer uses because the tokenizer has no chat template. The vocabulary is every word of TextWorld's text grammars
for the theme (all names and phrases the generator can write, so held-out games rarely show an unknown word) and
of the texts given (the training games' objectives, answers and commands), each with and without its `▁`.
Left out: subwords (an unknown word is `<|unk|>`), and any pretraining.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from textworld.generator import data
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tracec.trace_rl.envs.textworld.family import family_texts
from tracec.trace_rl.policy.tiny_vocab import ROLE_TOKENS
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, EOS, UNK = "<|pad|>", "<|eos|>", "<|unk|>"
WORD_TOKENS = ("<action>", "</action>", "\n")  # whole tokens, decoded as they are
SPACE = "\u2581"  # ▁


def _pipeline(vocab: dict[str, int] | None) -> Any:
    tokenizer = Tokenizer(models.WordLevel(vocab or {UNK: 0}, unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(Regex("[ \t]+"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    return tokenizer


def word_pieces(texts: Iterable[str]) -> collections.Counter[str]:
    """The pieces the tokenizer splits `texts` into (without the whole tokens), counted."""
    pipeline = _pipeline(None)
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        for chunk in _outside_whole_tokens(text):
            normalized = pipeline.normalizer.normalize_str(chunk)
            counts.update(piece for piece, _ in pipeline.pre_tokenizer.pre_tokenize_str(normalized))
    return counts


def _outside_whole_tokens(text: str) -> list[str]:
    chunks = [text]
    for token in WORD_TOKENS + tuple(ROLE_TOKENS.values()):
        chunks = [part for chunk in chunks for part in chunk.split(token)]
    return chunks


def build_word_tokenizer(texts: Iterable[str], *, max_positions: int = 2048) -> Any:
    """A `PreTrainedTokenizerFast` over every word of `texts` (with and without `▁`) and the whole tokens."""
    words: set[str] = set()
    for piece in word_pieces(texts):
        bare = piece.removeprefix(SPACE)
        if bare:
            words.update((bare, SPACE + bare))
    words.add(SPACE)
    specials = (PAD, EOS, UNK, *ROLE_TOKENS.values())
    vocab = {token: i for i, token in enumerate(specials + WORD_TOKENS)}
    for word in sorted(words - set(vocab)):
        vocab[word] = len(vocab)
    pipeline = _pipeline(vocab)
    pipeline.add_special_tokens([AddedToken(t, normalized=False) for t in specials])
    pipeline.add_tokens([AddedToken(t, normalized=False, special=False) for t in WORD_TOKENS])
    return PreTrainedTokenizerFast(tokenizer_object=pipeline, eos_token=EOS, pad_token=PAD, unk_token=UNK,
                                   model_max_length=max_positions)


def grammar_texts(theme: str = "house") -> list[str]:
    """The text grammars TextWorld's generator writes a theme's names, rooms and instructions from."""
    folder = Path(next(iter(data.__path__))) / "text_grammars"
    return [path.read_text(encoding="utf-8") for path in sorted(folder.glob(f"{theme}_*.twg"))]


def vocabulary_texts(family: Any, games: Sequence[Path]) -> list[str]:
    """What a family's vocabulary is built from: the grammars and the training games' texts (never held-out ones)."""
    return grammar_texts() + family_texts(family, games) + ["Objective: Room: Inventory: Commands:"]


def build_small_policy(texts: Iterable[str], folder: str | Path, *, hidden: int = 64, layers: int = 2,
                       heads: int = 4, max_positions: int = 2048, seed: int = 0, head_std: float = 0.1) -> Path:
    """A randomly initialised Llama and its word tokenizer, saved as a checkpoint folder; the folder's path.

    The embeddings, tied to the LM head, are drawn with std `head_std` rather than the usual 0.02: LoRA never
    trains the head, and a logit is the final hidden state (norm ~sqrt(hidden) after the frozen RMSNorm) times a
    head row, so at 0.02 and hidden 64 no token's log-prob could move by more than ~2.6 nats and the policy could
    never come to prefer one command much; at 0.1 the bound is ~13 nats, and the untrained policy is still close
    to uniform over the commands (their scores are means over tokens)."""
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"build_small_policy: hidden={hidden} must split into heads={heads} of an even size")
    tokenizer = build_word_tokenizer(texts, max_positions=max_positions)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max_positions, bos_token_id=None,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):  # seeds the weights without touching the caller's generator
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():  # the tied head stays frozen under LoRA: its scale bounds how peaked the policy gets
            model.model.embed_tokens.weight.normal_(0.0, head_std)
    path = Path(folder)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def unknown_share(tokenizer: Any, texts: Iterable[str]) -> float:
    """The share of `texts`' tokens that are `<|unk|>` (how well a vocabulary covers other games)."""
    ids = [i for text in texts for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    return sum(i == tokenizer.unk_token_id for i in ids) / max(len(ids), 1)
