"""Chat turns as token ids: an episode is one growing sequence, and only each turn's action carries its advantage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.trace_rl.envs.protocol import Observation
from tracec.trace_rl.policy.catalog import resolve_model
from tracec.trace_rl.policy.tiny import build_tokenizer
from tracec.trace_rl.rollouts.turns import TemplateError, TurnTemplate, action_span
from transformers import AutoTokenizer


@pytest.fixture(scope="module", params=["smollm2", "tiny"])
def tokenizer(request: pytest.FixtureRequest) -> Any:
    if request.param == "tiny":
        return build_tokenizer()
    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"), local_files_only=True)


TURNS = ["<think>the guest is Ann</think> <action>find_guest(name=\"Ann Lee\")</action>",
         "<action>book(room=\"R7\", guest=\"G2\", nights=3, plan=breakfast)</action> done?",
         "I booked room R7 for you."]
OBSERVATIONS = [Observation(text='{"rows": [{"id": "G2"}]}', role="tool"), Observation(text="Thanks!", role="user")]


def _stream(template: TurnTemplate, tokenizer: Any) -> list[int]:
    ids = template.prompt_ids("You book rooms.", Observation(text="Book R7 for Ann Lee.", role="user"))
    for i, text in enumerate(TURNS):
        ids += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if i < len(OBSERVATIONS):
            ids += template.observation_ids(OBSERVATIONS[i], closed=True)
    return ids


def test_the_growing_stream_is_what_the_template_renders_for_the_whole_conversation(tokenizer: Any) -> None:
    template = TurnTemplate(tokenizer)
    messages = [{"role": "system", "content": "You book rooms."}, {"role": "user", "content": "Book R7 for Ann Lee."}]
    for i, text in enumerate(TURNS):
        messages.append({"role": "assistant", "content": text})
        if i < len(OBSERVATIONS):
            messages.append({"role": OBSERVATIONS[i].role, "content": OBSERVATIONS[i].text})
    stream = _stream(template, tokenizer)
    if template.uses_chat_template:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        # The template closes the last turn with "<|im_end|>\n"; the stream ends on the end-of-turn token.
        assert tokenizer.decode(stream) + "\n" == rendered
        assert stream == tokenizer(rendered, add_special_tokens=False)["input_ids"][:-1]
    else:
        text = tokenizer.decode(stream)
        assert text.startswith("<|system|>\nYou book rooms.\n<|user|>\nBook R7 for Ann Lee.\n<|assistant|>\n")
        assert "<|eos|>\n<|tool|>\n" in text and text.endswith("I booked room R7 for you.<|eos|>")


def test_an_unclosed_turn_gets_the_closing_the_template_writes(tokenizer: Any) -> None:
    template = TurnTemplate(tokenizer)
    open_ids = template.observation_ids(Observation(text="ok", role="tool"), closed=False)
    closed_ids = template.observation_ids(Observation(text="ok", role="tool"), closed=True)
    if template.uses_chat_template:
        assert open_ids[0] == tokenizer.eos_token_id and open_ids[1:] == closed_ids
    else:
        assert open_ids == closed_ids  # <|eos|> is not part of the fallback template's text


@settings(max_examples=60, deadline=None)
@given(think=st.text(st.sampled_from("abc <>/=\n"), max_size=12),
       call=st.text(st.sampled_from("xyz(),=\"' 0123"), min_size=1, max_size=20),
       tail=st.text(st.sampled_from("ok. \n"), max_size=8))
def test_loss_tokens_cover_the_action_and_nothing_else(tokenizer: Any, think: str, call: str, tail: str) -> None:
    template = TurnTemplate(tokenizer)
    action = f"<action>{call}</action>"
    text = f"<think>{think.replace('</think>', '')}</think>{action}{tail}"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    first, stop = template.action_token_range(ids)
    covered = tokenizer.decode(ids[first:stop])
    # Every character of the action is covered; at most a token's worth of neighbours rides along (BPE merges
    # the tag with a leading space or a trailing newline), and never the end-of-turn token or the thinking.
    assert action in covered
    assert stop <= len(ids) - 1 and "</think>" not in covered
    widest = max(len(tokenizer.decode([t])) for t in ids[first:stop])
    assert len(covered) - len(action) <= 2 * widest


def test_action_spans() -> None:
    assert action_span("<think>plan</think> <action>go(x=1)</action> bye") == (20, 44)
    assert action_span("<think>still thinking") == (21, 21)
    assert action_span("  Your room is booked.") == (2, 22)
    assert action_span('<think>a</think>\n{"name": "find"}') == (17, 33)
    assert action_span("<action>go(x=1") == (0, 14)  # an unclosed action runs to the end


def test_a_template_that_rewrites_history_is_refused() -> None:
    tokenizer = build_tokenizer()
    # Drops every earlier assistant turn, as templates that hide old reasoning do.
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
                               "<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endif %}{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    with pytest.raises(TemplateError, match="renders the earlier turns differently"):
        TurnTemplate(tokenizer)
