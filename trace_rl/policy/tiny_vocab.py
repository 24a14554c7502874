"""What the tiny model holds, without torch: its character vocabulary, its special tokens and its size.

The vocabulary of `trace_rl.policy.tiny` (one token per printable ASCII character but the backslash, tab and
newline, plus the special tokens), the role markers of the fallback chat template, `parameter_count()`, which
says how many parameters `build_tiny_model` gives without building it, and `tiny_modules()`, its layers' names.
They live apart from the model so that `tracec models`, the chat rendering (`tracec.trace_rl.llm.conversation`) and
a run's load-time checks import neither torch nor transformers.
"""

from __future__ import annotations

PAD, EOS, UNK = "<|pad|>", "<|eos|>", "<|unk|>"
# The role markers of the fallback chat template (`tracec.trace_rl.llm.conversation`), by chat role. They are
# defined here, the lowest layer that needs them, because the tokenizers without a chat template hold them as tokens.
ROLE_TOKENS = {role: f"<|{role}|>" for role in ("system", "user", "assistant", "tool")}
SPECIAL_TOKENS = (PAD, EOS, UNK, *ROLE_TOKENS.values())
CHARACTERS = ("\t", "\n", *(chr(code) for code in range(32, 127) if chr(code) != "\\"))


def parameter_count(*, layers: int = 2, hidden: int = 64) -> int:
    """The parameters `build_tiny_model` gives: the embedding (tied to the output), per layer the four attention
    and three MLP matrices (no biases; as many key/value heads as heads) and two norms, then the final norm."""
    vocabulary = len(SPECIAL_TOKENS) + len(CHARACTERS)
    per_layer = 4 * hidden * hidden + 3 * hidden * (2 * hidden) + 2 * hidden
    return vocabulary * hidden + layers * per_layer + hidden


def tiny_modules(*, layers: int = 2) -> tuple[str, ...]:
    """The full names of the modules of `build_tiny_model` that hold a weight matrix (what LoRA can adapt): a
    Llama's, its output layer tied to the embedding."""
    per_layer = [f"self_attn.{name}_proj" for name in "qkvo"] + [f"mlp.{name}_proj" for name in ("gate", "up", "down")]
    return ("model.embed_tokens", *(f"model.layers.{i}.{name}" for i in range(layers) for name in per_layer),
            "lm_head")
