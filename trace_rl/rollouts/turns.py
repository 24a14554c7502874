"""Chat turns as token ids, built so that an episode is one growing sequence, and the action tokens of each turn.

A multi-turn episode is trained as ONE sequence: the prompt, then per agent turn the sampled tokens followed by the
tokens of the environment's answer (its observation, the user's or the tool's turn) and the next generation prompt.
`TurnTemplate` produces exactly those pieces from the tokenizer's chat template (or the fallback template, by the one
rule of `tracec.trace_rl.llm.conversation`), so the token stream the sampler decodes is the stream the template would
render for the whole conversation: each turn's prompt is a prefix of the
next. It checks that property once, on probe messages, and refuses a template that breaks it (one that rewrites
earlier turns, as templates that drop old `<think>` blocks do), since such a conversation cannot be one sequence.
Only the environment's text is ever tokenized; the agent's turns stay the ids the sampler drew (token-in/token-out).

`action_token_range` finds which sampled tokens of a turn carry its advantage: the `<action>...</action>` element or
the native `<tool_call>...</tool_call>` one (tags included: the environment reads them; `<action>` first, as it
does), or, for a turn without tags (a bare JSON tool call, a message to the user), the text after any
`<think>...</think>`. Thinking, the closing end-of-turn token and anything after the action are context, and so is
the first prompt, where tools given as JSON schemas (`tools=`, the native call format) are rendered. `choice_ids` is
a command the policy chooses rather than writes (the admissible-command action mode): the same closed turn,
`<action>command</action>` and the end-of-turn token. Left out: several actions in one turn (the first one counts,
as the environments read it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tracec.trace_rl.envs.protocol import Observation
from tracec.trace_rl.llm import conversation

_PROBE_SYSTEM, _PROBE_USER, _PROBE_AGENT = "Probe system.", "Probe task.", " <action>probe(x=1)</action>\n "
_ACTION = re.compile(r"<action>.*?(?:</action>|\Z)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)  # the native call format


class TemplateError(ValueError):
    """A chat template that cannot render an episode as one growing token sequence."""


class TurnTemplate:
    """The token pieces of an episode for one tokenizer: the first prompt, and what follows each agent turn."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.uses_chat_template = conversation.uses_chat_template(tokenizer)
        probe = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": _PROBE_USER}]
        opened = conversation.render(tokenizer, probe)
        self._history = [*probe, {"role": "assistant", "content": _PROBE_AGENT}]
        closed = conversation.render(tokenizer, self._history, generation=False)
        if not closed.startswith(opened + _PROBE_AGENT):
            raise TemplateError("the chat template does not render an agent turn as the generation prompt followed by "
                                "the turn's text unchanged; multi-turn training needs each prompt to be a prefix of "
                                "the next (use a checkpoint with a plain ChatML-like template)")
        self._closing = closed[len(opened) + len(_PROBE_AGENT):]  # e.g. "<|im_end|>\n" after an agent turn
        self._closed_history = closed
        self._closed_with_tools: dict[str, str] = {}  # the closed probe per tool list (this template's, not global)
        eos = tokenizer.eos_token_id
        stops = {eos} if eos is not None else set()
        closing_ids = tokenizer(self._closing, add_special_tokens=False)["input_ids"] if self._closing else []
        closer = eos
        if closing_ids and closing_ids[0] in set(tokenizer.all_special_ids):
            stops.add(closing_ids[0])  # the template's end-of-turn token (ChatML's <|im_end|>)
            closer = closing_ids[0]
        if not stops or closer is None:
            raise TemplateError("the tokenizer has no end-of-sequence token, so an agent turn could never end")
        self.end_of_turn_ids: frozenset[int] = frozenset(stops)
        self.end_of_turn_id: int = int(closer)  # what closes a turn the policy did not decode (a chosen command)
        # Probe the observation delta too: a template that rewrites history fails here.
        self.observation_ids(Observation(text="probe observation", role="user"), closed=True)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def prompt_ids(self, system_prompt: str, observation: Observation, *,
                   tools: conversation.Tools | None = None) -> list[int]:
        """The first prompt: the system message (if any, with the `tools` as the template renders them), the first
        observation, the generation prompt."""
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": observation.role, "content": observation.text})
        return conversation.encode(self.tokenizer, messages, tools=tools or None)

    def observation_ids(self, observation: Observation, *, closed: bool,
                        tools: conversation.Tools | None = None) -> list[int]:
        """The tokens after an agent turn: its closing (less the end-of-turn token the sampler already drew when
        `closed`), the observation's message, and the next generation prompt (of a conversation given `tools`)."""
        history = self._closed_history
        if tools:  # the probe rendered with the episode's tools: a template may place them anywhere
            key = json.dumps(tools, sort_keys=True)
            if key not in self._closed_with_tools:
                self._closed_with_tools[key] = conversation.render(self.tokenizer, self._history, generation=False,
                                                                   tools=tools)
            history = self._closed_with_tools[key]
        grown = conversation.render(self.tokenizer,
                                    [*self._history, {"role": observation.role, "content": observation.text}],
                                    tools=tools or None)
        if not grown.startswith(history):
            raise TemplateError("the chat template renders the earlier turns differently once a new message follows; "
                                "an episode cannot then be one growing sequence")
        closing = self._closing
        eos_text = self.tokenizer.eos_token or ""
        if closed and eos_text and closing.startswith(eos_text):
            closing = closing[len(eos_text):]
        return self._ids(closing + grown[len(history):])

    def choice_ids(self, command: str) -> list[int]:
        """An admissible command as the closed turn that plays it: `<action>command</action>`, then the end-of-turn
        token (the admissible-command action mode scores and samples these)."""
        return self.closed_turn_ids(choice_text(command))

    def closed_turn_ids(self, text: str) -> list[int]:
        """A turn the policy did not decode (a chosen command, a scripted turn): `text`'s tokens, then the
        end-of-turn token."""
        return self._ids(text) + [self.end_of_turn_id]

    def turn_text(self, ids: Sequence[int]) -> str:
        """What the environment receives for sampled `ids`: the decoded text, without the end-of-turn token."""
        return str(self.tokenizer.decode(list(self._strip_end(ids)), skip_special_tokens=True,
                                         clean_up_tokenization_spaces=False))

    def _strip_end(self, ids: Sequence[int]) -> Sequence[int]:
        return ids[:-1] if ids and ids[-1] in self.end_of_turn_ids else ids

    def action_token_range(self, ids: Sequence[int]) -> tuple[int, int]:
        """[first, stop) of the sampled `ids` that overlap the turn's action text (empty when it has none)."""
        body = list(self._strip_end(ids))
        text = self.turn_text(body)
        start, stop = action_span(text)
        if start >= stop:
            return 0, 0
        # Character end of each token: the decoded length of every prefix (one batched call in the fast tokenizer).
        prefixes = self.tokenizer.batch_decode([body[: i + 1] for i in range(len(body))], skip_special_tokens=True,
                                               clean_up_tokenization_spaces=False)
        ends = [len(prefix) for prefix in prefixes]
        begins = [0, *ends[:-1]]
        inside = [i for i, (b, e) in enumerate(zip(begins, ends)) if b < stop and e > start]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)


def choice_text(command: str) -> str:
    """The text of a turn that plays `command`."""
    return f"<action>{command}</action>"


def action_span(text: str) -> tuple[int, int]:
    """[start, stop) characters of a turn's action: the first `<action>...</action>` after any thinking, else the first
    `<tool_call>...</tool_call>` (an unclosed one runs to the end), else the text after `</think>` less its leading
    blanks; an unclosed `<think>` has none."""
    begin = 0
    close = text.rfind("</think>")
    if close >= 0:
        begin = close + len("</think>")
    elif "<think>" in text:
        return len(text), len(text)
    match = _ACTION.search(text, begin) or _TOOL_CALL.search(text, begin)
    if match:
        return match.start(), match.end()
    while begin < len(text) and text[begin].isspace():
        begin += 1
    return begin, len(text)
