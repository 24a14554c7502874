"""A conversation as tokens: the one rule every path that feeds a model messages follows.

The local backend, the episode's turns, the adapters' routing prompts and vLLM's adapters all render and encode
messages here, so the ids a policy is trained on are the ids it decodes from and is routed by. A tokenizer with a
chat template renders with it; one without (the tiny model, the small word-level policy) renders with the fallback
template, `<|role|>\\ncontent\\n` per message and then `<|assistant|>\\n`, whose role markers are special tokens of
those tokenizers (`tracec.trace_rl.policy.tiny_vocab.ROLE_TOKENS`).

Tools (OpenAI-style JSON schemas, `[{"type": "function", "function": {...}}]`) come as `tools=`, or carried on the
system message under `TOOLS_KEY` as a JSON string: the way a `ChatBackend`, which takes only messages, gets them
(`with_tools` puts them there). A template that renders tools itself (probed each call: a probe rendered with and
without a tool differs) gets them as `tools=`; any other (SmolLM2's ignores them, the fallback has none) gets them
in the system message as the Hermes block Qwen2.5's template writes (`tools_block`), so the model reads the same
`# Tools` text and answers with `<tool_call>{...}</tool_call>`. `fold_tools` does the same for a server whose
template is not ours to probe (the HTTP backend).
Left out: tool calls as structured `tool_calls` fields of assistant messages (a turn is the text the model wrote).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tracec.trace_rl.policy.tiny_vocab import ROLE_TOKENS

_GENERATION = f"{ROLE_TOKENS['assistant']}\n"  # where the fallback template opens the reply
TOOLS_KEY = "tools"  # the system message's key that carries the tools as a JSON string (see `with_tools`)
# Qwen2.5's Hermes tool block, word for word: the text such models were tuned to read.
_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
_PROBE = [{"role": "system", "content": "Probe system."}, {"role": "user", "content": "Probe task."}]
_PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool", "description": "Probe.",
                                                 "parameters": {"type": "object", "properties": {}}}}

Tools = list[dict[str, Any]]


def uses_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` renders conversations itself (an empty template counts as none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template writes tools given as `tools=` (a probe renders differently with one)."""
    if not uses_chat_template(tokenizer):
        return False
    plain = tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True)
    return bool(plain != tokenizer.apply_chat_template(_PROBE, tools=[_PROBE_TOOL], tokenize=False,
                                                       add_generation_prompt=True))


def tools_block(tools: Tools) -> str:
    """The Hermes `# Tools` block: each schema one JSON a line inside <tools></tools>, then how to call one."""
    # json.dumps's default separators are what the templates' `tojson` writes
    return _TOOLS_HEAD + "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools) + _TOOLS_TAIL


def with_tools(messages: list[dict[str, str]], tools: Tools) -> list[dict[str, str]]:
    """`messages` with `tools` carried on the system message (one is added when there is none); no tools, as given."""
    if not tools:
        return list(messages)
    carried = json.dumps(tools, ensure_ascii=False)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], TOOLS_KEY: carried}, *messages[1:]]
    return [{"role": "system", "content": "", TOOLS_KEY: carried}, *messages]


def split_tools(messages: list[dict[str, str]], tools: Tools | None = None) -> tuple[list[dict[str, str]], Tools]:
    """The messages without carried tools, and the tools: `tools` if given, else those the system message carries."""
    if not messages or TOOLS_KEY not in messages[0]:
        return list(messages), list(tools or [])
    first = dict(messages[0])
    carried = first.pop(TOOLS_KEY)
    if tools is None:
        try:
            tools = json.loads(carried)
        except (TypeError, ValueError) as error:
            raise ValueError(f"message 0: {TOOLS_KEY!r} must be a JSON list of tool schemas ({error})") from None
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise ValueError(f"message 0: {TOOLS_KEY!r} must be a JSON list of tool schemas, got {carried[:60]!r}")
    return [first, *messages[1:]], list(tools)


def fold_tools(messages: list[dict[str, str]], tools: Tools | None = None) -> list[dict[str, str]]:
    """The messages with the tools written into the system message as the Hermes block (no key carries them)."""
    plain, tools = split_tools(messages, tools)
    if not tools:
        return plain
    if plain and plain[0]["role"] == "system":
        system = plain[0]["content"]
        return [{**plain[0], "content": f"{system}\n\n{tools_block(tools)}" if system else tools_block(tools)},
                *plain[1:]]
    return [{"role": "system", "content": tools_block(tools)}, *plain]


def prepare(tokenizer: Any, messages: list[dict[str, str]],
            tools: Tools | None = None) -> tuple[list[dict[str, str]], Tools | None]:
    """The messages and the `tools=` to render them with: the template's own way when it renders tools, else the
    Hermes block in the system message and no `tools=`."""
    plain, tools = split_tools(messages, tools)
    if not tools:
        return plain, None
    if renders_tools(tokenizer):
        return plain, tools
    return fold_tools(plain, tools), None


def render_fallback(messages: list[dict[str, str]], *, generation: bool = True) -> str:
    """The fallback template: `<|role|>\\ncontent\\n` each, then (with `generation`) `<|assistant|>\\n`."""
    text = "".join(f"{ROLE_TOKENS[m['role']]}\n{m['content']}\n" for m in messages)
    return text + _GENERATION if generation else text


def render(tokenizer: Any, messages: list[dict[str, str]], *, generation: bool = True,
           tools: Tools | None = None) -> str:
    """The text of `messages` (with `tools`, or those the system message carries), ending (with `generation`)
    where the assistant's reply begins."""
    template = uses_chat_template(tokenizer)
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not all(isinstance(message.get(k), str) for k in ("role", "content")):
            raise ValueError(f"message {i}: expected {{'role': str, 'content': str}}, got {message!r}")
        if not template and message["role"] not in ROLE_TOKENS:
            raise ValueError(f"message {i}: role {message['role']!r} has no token in the fallback template "
                             f"(roles: {', '.join(ROLE_TOKENS)})")
    messages, native = prepare(tokenizer, messages, tools)
    if template:
        options = {} if native is None else {"tools": native}
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **options)
        assert isinstance(text, str)
        return text
    return render_fallback(messages, generation=generation)


def encode(tokenizer: Any, messages: list[dict[str, str]], *, tools: Tools | None = None) -> list[int]:
    """The token ids of `render(tokenizer, messages, tools=tools)`: the prompt, up to where the reply begins, uncut."""
    # A chat template writes its own BOS; the fallback relies on the tokenizer adding one if it has one.
    # verbose=False: a prompt over the tokenizer's length is no error here; a caller that must fit one cuts it.
    text = render(tokenizer, messages, tools=tools)
    return list(tokenizer(text, add_special_tokens=not uses_chat_template(tokenizer), verbose=False)["input_ids"])


def decode_reply(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """A reply's text from its sampled ids, special tokens dropped: the one rule every engine decodes by, so a reply
    cut mid-character reads the same everywhere (the tokenizer's replacement character, where vLLM's incremental
    detokenizer would hold the partial bytes back)."""
    return str(tokenizer.decode(list(token_ids), skip_special_tokens=True))
