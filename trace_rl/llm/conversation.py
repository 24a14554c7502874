"""A conversation as tokens: the one rule every path that feeds a model messages follows.

The local backend, the episode's turns, the adapters' routing prompts and vLLM's adapters all render and encode
messages here, so the ids a policy is trained on are the ids it decodes from and is routed by. A tokenizer with a
chat template renders with it; one without (the tiny model, the small word-level policy) renders with the fallback
template, `<|role|>\\ncontent\\n` per message and then `<|assistant|>\\n`, whose role markers are special tokens of
those tokenizers (`tracec.trace_rl.policy.tiny_vocab.ROLE_TOKENS`).
"""

from __future__ import annotations

from typing import Any

from tracec.trace_rl.policy.tiny_vocab import ROLE_TOKENS

_GENERATION = f"{ROLE_TOKENS['assistant']}\n"  # where the fallback template opens the reply


def uses_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` renders conversations itself (an empty template counts as none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render_fallback(messages: list[dict[str, str]], *, generation: bool = True) -> str:
    """The fallback template: `<|role|>\\ncontent\\n` each, then (with `generation`) `<|assistant|>\\n`."""
    text = "".join(f"{ROLE_TOKENS[m['role']]}\n{m['content']}\n" for m in messages)
    return text + _GENERATION if generation else text


def render(tokenizer: Any, messages: list[dict[str, str]], *, generation: bool = True) -> str:
    """The text of `messages`, ending (with `generation`) where the assistant's reply begins."""
    template = uses_chat_template(tokenizer)
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not all(isinstance(message.get(k), str) for k in ("role", "content")):
            raise ValueError(f"message {i}: expected {{'role': str, 'content': str}}, got {message!r}")
        if not template and message["role"] not in ROLE_TOKENS:
            raise ValueError(f"message {i}: role {message['role']!r} has no token in the fallback template "
                             f"(roles: {', '.join(ROLE_TOKENS)})")
    if template:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
        assert isinstance(text, str)
        return text
    return render_fallback(messages, generation=generation)


def encode(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The token ids of `render(tokenizer, messages)`: the prompt, up to where the reply begins, uncut."""
    # A chat template writes its own BOS; the fallback relies on the tokenizer adding one if it has one.
    # verbose=False: a prompt over the tokenizer's length is no error here; a caller that must fit one cuts it.
    text = render(tokenizer, messages)
    return list(tokenizer(text, add_special_tokens=not uses_chat_template(tokenizer), verbose=False)["input_ids"])
