"""The CPU rollout backend: a `transformers` causal LM behind `ChatBackend` (`generate(messages) -> str`).

Messages become the prompt's tokens by the one rule of `tracec.trace_rl.llm.conversation` (the tokenizer's chat
template, else the fallback template; tools carried on the system message, `conversation.with_tools`, are rendered
as the template renders tools, else as the Hermes block); the prompt is left-truncated to the model's positions
minus the new tokens, and replies are sampled by `model.generate` with exactly the temperature and top-p of
`SamplingConfig` (top-k and repetition penalties a checkpoint's generation config may set are turned off, so samples
follow the policy).
Call n of a backend samples under a seed drawn from (config.seed, n) inside a forked RNG: a fresh backend with the
same seed replays the same replies, asking twice gives two samples, and the global RNG is left as it was.
It also speaks `SamplingBackend`: `sample(messages, Sampling(...))` overrides max tokens, temperature and top-p for
one call, stops at stop strings (generation ends at the first one, and the reply is cut before it), and returns n
replies decoded as one batch; a given seed makes the call replay exactly, without one it takes the next call seed.
Models load only from local folders (`local_files_only`); nothing is downloaded.
Left out: batching different prompts, returning token ids or log-probs (the trainer's token-level engine does),
and vLLM (`trace_rl/llm/vllm_backend.py`, behind the same protocol).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.chat import Sampling, cut_at_stop, is_int, is_number
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 decodes greedily
    top_p: float = 1.0  # 1 turns nucleus sampling off
    seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig: max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if not is_number(self.temperature) or not self.temperature >= 0:
            raise ValueError(f"SamplingConfig: temperature={self.temperature!r} must be a number >= 0 "
                             "(use 0 for greedy decoding)")
        if not is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig: top_p={self.top_p!r} must be in (0, 1] "
                             "(use 1.0 to turn nucleus sampling off)")
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"SamplingConfig: seed={self.seed!r} must be an integer >= 0")


class TransformersBackend:
    """One causal LM and its tokenizer as a chat backend; the model's device and dtype are left as given."""

    def __init__(self, model: Any, tokenizer: Any, *, config: SamplingConfig = SamplingConfig(),
                 name: str | None = None) -> None:
        self.positions = _max_positions(model.config)
        _check_room(config.max_new_tokens, self.positions, "max_new_tokens")
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.max_prompt_tokens = self.positions - config.max_new_tokens
        self._name = name or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        self._calls = 0

    @classmethod
    def from_pretrained(cls, path: str | Path, *, config: SamplingConfig = SamplingConfig(),
                        device: str = "cpu") -> TransformersBackend:
        """A backend over the checkpoint in the local folder `path` (a `save_pretrained` folder); never downloads."""
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}: no config.json here; pass a local checkpoint folder written by "
                                    "save_pretrained (models are never downloaded)")
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        return cls(model.to(device).eval(), tokenizer, config=config, name=folder.name)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the model and tokenizer to `folder`, which `from_pretrained` reads back."""
        path = Path(folder)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    @property
    def name(self) -> str:
        return self._name

    @property
    def uses_chat_template(self) -> bool:
        return conversation.uses_chat_template(self.tokenizer)

    def render(self, messages: list[dict[str, str]], *, tools: conversation.Tools | None = None) -> str:
        """The prompt text for `messages` (and `tools`, else those they carry), ending where the reply begins."""
        return conversation.render(self.tokenizer, messages, tools=tools)

    def prompt_ids(self, messages: list[dict[str, str]], max_new_tokens: int | None = None, *,
                   tools: conversation.Tools | None = None) -> list[int]:
        """The prompt's token ids, cut from the left to leave room for the reply (its start is what matters)."""
        room = self.max_prompt_tokens if max_new_tokens is None else self.positions - max_new_tokens
        return conversation.encode(self.tokenizer, messages, tools=tools)[-room:]

    def generate(self, messages: list[dict[str, str]]) -> str:
        """The model's reply to `messages` under the backend's config: only the new text, special tokens removed."""
        return self.sample(messages, Sampling())[0]

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        """`sampling.n` replies to `messages`; unset fields of `sampling` fall back to the backend's config."""
        max_new = sampling.max_tokens or self.config.max_new_tokens
        _check_room(max_new, self.positions, "max_tokens")
        temperature = self.config.temperature if sampling.temperature is None else sampling.temperature
        top_p = self.config.top_p if sampling.top_p is None else sampling.top_p
        ids = self.prompt_ids(messages, max_new)
        device = self.model.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=device)
        if sampling.seed is None:
            seed = _call_seed(self.config.seed, self._calls)
            self._calls += 1
        else:
            seed = _call_seed(sampling.seed, 0)
        greedy = temperature == 0
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        generation = GenerationConfig(
            do_sample=not greedy, temperature=temperature or 1.0, top_p=top_p, top_k=0, repetition_penalty=1.0,
            max_new_tokens=max_new, pad_token_id=pad, eos_token_id=self.tokenizer.eos_token_id,
            num_return_sequences=1 if greedy else sampling.n, stop_strings=list(sampling.stop) or None,
        )
        with _forked_rng(device):
            torch.manual_seed(seed)
            output = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                         generation_config=generation,
                                         tokenizer=self.tokenizer if sampling.stop else None)
        replies = [cut_at_stop(conversation.decode_reply(self.tokenizer, row[len(ids) :].tolist()), sampling.stop)
                   for row in output]
        return replies * sampling.n if greedy else replies  # greedy decoding gives one reply, n times


def _check_room(max_new_tokens: int, positions: int, field: str) -> None:
    if max_new_tokens >= positions:
        raise ValueError(f"TransformersBackend: {field}={max_new_tokens} leaves no room for a prompt in a model of "
                         f"{positions} positions; lower {field} below {positions}")


def _max_positions(config: Any) -> int:
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not isinstance(positions, int) or positions < 2:
        raise ValueError(f"TransformersBackend: the model config ({type(config).__name__}) states no "
                         "max_position_embeddings or n_positions, which prompt truncation needs; set one on the config")
    return positions


def _call_seed(seed: int, call: int) -> int:
    # SeedSequence mixes the pair, so (seed, call) and (seed + 1, call - 1) draw unrelated samples.
    return int(np.random.SeedSequence([seed, call]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@contextmanager
def _forked_rng(device: torch.device) -> Iterator[None]:
    # fork_rng always saves the CPU state; on an accelerator fork every device, since manual_seed seeds them all.
    if device.type == "cpu":
        with torch.random.fork_rng(devices=[]):
            yield
        return
    count = torch.get_device_module(device.type).device_count()
    with torch.random.fork_rng(devices=range(count), device_type=device.type):
        yield
