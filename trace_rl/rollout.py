"""The CPU rollout backend: a `transformers` causal LM behind `ChatBackend` (`generate(messages) -> str`).

Messages are rendered with the tokenizer's chat template when it has one, else with a plain fallback template
(`<|role|>\\ncontent\\n` per message, then `<|assistant|>\\n`), left-truncated to the model's positions minus the
new tokens, and sampled by `model.generate` with exactly the temperature and top-p of `SamplingConfig` (top-k and
repetition penalties a checkpoint's generation config may set are turned off, so samples follow the policy).
Call n of a backend samples under a seed drawn from (config.seed, n) inside a forked RNG: a fresh backend with the
same seed replays the same replies, asking twice gives two samples, and the global RNG is left as it was.
Models load only from local folders (`local_files_only`); nothing is downloaded.
Left out: batching prompts, returning token ids or log-probs (the trainer recomputes them), stop strings, and
vLLM (the GPU backend lives behind the same protocol).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 decodes greedily
    top_p: float = 1.0  # 1 turns nucleus sampling off
    seed: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig: max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if not _is_number(self.temperature) or not self.temperature >= 0:
            raise ValueError(f"SamplingConfig: temperature={self.temperature!r} must be a number >= 0 "
                             "(use 0 for greedy decoding)")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig: top_p={self.top_p!r} must be in (0, 1] "
                             "(use 1.0 to turn nucleus sampling off)")
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"SamplingConfig: seed={self.seed!r} must be an integer >= 0")


def render_fallback(messages: list[dict[str, str]]) -> str:
    """The template for tokenizers without a chat template: `<|role|>\\ncontent\\n` each, then `<|assistant|>\\n`."""
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


class TransformersBackend:
    """One causal LM and its tokenizer as a chat backend; the model's device and dtype are left as given."""

    def __init__(self, model: Any, tokenizer: Any, *, config: SamplingConfig = SamplingConfig()) -> None:
        positions = _max_positions(model.config)
        if config.max_new_tokens >= positions:
            raise ValueError(f"TransformersBackend: max_new_tokens={config.max_new_tokens} leaves no room for a prompt "
                             f"in a model of {positions} positions; lower max_new_tokens below {positions}")
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.max_prompt_tokens = positions - config.max_new_tokens
        self._calls = 0
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._generation = GenerationConfig(
            do_sample=config.temperature > 0, temperature=config.temperature or 1.0, top_p=config.top_p, top_k=0,
            repetition_penalty=1.0, max_new_tokens=config.max_new_tokens, pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )

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
        return cls(model.to(device).eval(), tokenizer, config=config)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the model and tokenizer to `folder`, which `from_pretrained` reads back."""
        path = Path(folder)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    @property
    def uses_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text for `messages`, ending where the assistant's reply begins."""
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not all(isinstance(message.get(k), str) for k in ("role", "content")):
                raise ValueError(f"message {i}: expected {{'role': str, 'content': str}}, got {message!r}")
        if self.uses_chat_template:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            assert isinstance(text, str)
            return text
        return render_fallback(messages)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's token ids, cut from the left to `max_prompt_tokens` (the reply's start is what matters)."""
        # A chat template writes its own BOS; the fallback relies on the tokenizer adding one if it has one.
        # verbose=False: a prompt over the tokenizer's length is expected here, the next line cuts it.
        ids = self.tokenizer(self.render(messages), add_special_tokens=not self.uses_chat_template,
                             verbose=False)["input_ids"]
        return list(ids[-self.max_prompt_tokens :])

    def generate(self, messages: list[dict[str, str]]) -> str:
        """The model's reply to `messages`: only the new text, special tokens removed."""
        ids = self.prompt_ids(messages)
        device = self.model.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=device)
        seed = _call_seed(self.config.seed, self._calls)
        self._calls += 1
        with _forked_rng(device):
            torch.manual_seed(seed)
            output = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                         generation_config=self._generation)
        return str(self.tokenizer.decode(output[0, len(ids) :].tolist(), skip_special_tokens=True))


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
