"""The one user vocabulary: `ScriptedUser` (lines, then a fixed answer or the end, a done pattern) and `LLMUser`
(a chat model with the scenario in its prompt, roles flipped, end tokens)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tracec.trace_rl.envs.users import (
    CARRY_ON,
    CLOSING,
    END_TOKENS,
    STOP,
    TRANSFER,
    LLMUser,
    Reply,
    ScriptedUser,
    end_token,
)


class Model:
    """A chat backend that answers from a list and keeps every prompt."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.calls = list(answers), []  # type: ignore[var-annotated]

    def generate(self, messages: list[dict[str, str]]) -> str:
        self.calls.append(messages)
        return self.answers.pop(0)


def test_without_a_greeting_the_user_opens_with_the_scenario() -> None:
    user = ScriptedUser(["unused first line"])
    assert user.start("Please cancel my trip.") == "Please cancel my trip."
    assert user.respond("Which one?") == Reply(text="unused first line")
    assert user.respond("And now?") == Reply(text=CARRY_ON)


def test_the_default_user_carries_on_until_the_agent_says_it_is_done() -> None:
    user = ScriptedUser()
    user.start("task")
    assert user.respond("Which trip do you mean?") == Reply(text=CARRY_ON)
    assert user.respond("All FINISHED, refund 12.") == Reply(text=CLOSING, end=STOP)
    assert user.respond("###STOP###") == Reply(text=CLOSING, end=STOP)


def test_lines_then_the_end_and_a_new_start_says_them_again() -> None:
    user = ScriptedUser(["Hi.", "Yes."], then=None, done_pattern=None, closing=STOP)
    for _ in range(2):
        assert user.start("scenario", greeting="Hello!") == "Hi."
        assert user.respond("I am done.") == Reply(text="Yes.")  # no done pattern: done is just words
        assert user.respond("Anything else?") == Reply(text=STOP, end=STOP)


@given(lines=st.lists(st.text(max_size=10), max_size=4), messages=st.lists(st.text(max_size=10), max_size=6))
def test_a_scripted_user_says_its_lines_in_order_whatever_it_hears(lines: list[str], messages: list[str]) -> None:
    user = ScriptedUser(lines, then="ok", done_pattern=None)
    said = [user.start("s", greeting="hi")] + [user.respond(m).text for m in messages]
    assert said == (lines + ["ok"] * (len(messages) + 1))[: len(said)]


def test_llm_user_without_a_greeting_states_the_scenario_and_strips_the_end_token() -> None:
    model = Model("Yes, the Monday one. ", "Thanks! ###STOP###", "###TRANSFER###")
    user = LLMUser(model, prompt="Rules {with braces}.\nYou want: {scenario}")
    assert user.start("cancel T1") == "cancel T1" and model.calls == []  # the opening costs no generation
    assert user.respond("Which trip?") == Reply(text="Yes, the Monday one.")
    assert user.respond("Cancelled.") == Reply(text="Thanks!", end=STOP)
    assert user.respond("Bye.") == Reply(text=CLOSING, end=TRANSFER)  # nothing left but the token
    system, *dialogue = model.calls[1]
    assert system == {"role": "system", "content": "Rules {with braces}.\nYou want: cancel T1"}
    assert dialogue == [{"role": "assistant", "content": "cancel T1"}, {"role": "user", "content": "Which trip?"},
                        {"role": "assistant", "content": "Yes, the Monday one. "},
                        {"role": "user", "content": "Cancelled."}]


def test_llm_user_answers_a_greeting_and_can_keep_the_end_token() -> None:
    model = Model(" I need to return a lamp.", "Thanks, bye ###OUT-OF-SCOPE###", "Hello.")
    user = LLMUser(model, prompt="<scenario>{scenario}</scenario>", keep_end_token=True)
    assert user.start("Persona: calm", greeting="Hi! How can I help?") == "I need to return a lamp."
    assert user.respond("Sorry, I cannot.") == Reply(text="Thanks, bye ###OUT-OF-SCOPE###", end="###OUT-OF-SCOPE###")
    assert [m["role"] for m in model.calls[0]] == ["system", "user"]
    assert model.calls[0][1]["content"] == "Hi! How can I help?"
    user.start("again", greeting="Hi!")  # a new conversation forgets the old one
    assert len(user.messages) == 3 and user.messages[0]["content"] == "<scenario>again</scenario>"


def test_a_prompt_without_the_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match=r"must hold \{scenario\}"):
        LLMUser(Model(), prompt="You are a customer.")


def test_end_tokens() -> None:
    assert [end_token(f"ok {t}") for t in END_TOKENS] == list(END_TOKENS)
    assert end_token("I am done.") is None
