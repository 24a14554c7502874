"""`says_yes` on replies that simulated users write (the tau2-bench user simulator answers one message at a time, in
its own words, and discloses what it knows progressively), and the `confirmed` facts that ride on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.capability.episode import CapabilityEnvironment
from tracec.trace_rl.envs.consent import says_yes
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.envs.users import ScriptedUser

CONSENT = [
    "Yes",
    "yes",
    "Yes.",
    "YES PLEASE",
    "Yes, please.",
    "Yes please!!",
    "Yeah, go ahead.",
    "Yep, that's right.",
    "Sure, go ahead.",
    "Sure thing, please proceed.",
    "OK",
    "Okay, do it.",
    "Alright, go for it.",
    "That's correct.",
    "That is correct, please go ahead.",
    "Correct.",
    "Right.",
    "I confirm.",
    "Yes, I confirm. Please go ahead.",
    "Confirmed.",
    "Confirm the cancellation, please.",
    "Absolutely, go ahead.",
    "Of course, please proceed with the exchange.",
    "Please do.",
    "Please go ahead with my request, and tell me when you are done.",
    "Yes, please go ahead with my request, and tell me when you are done.",  # the scripted user of the envs
    "Sounds good, thank you!",
    "That works for me.",
    "No problem, go ahead.",
    "No worries, you can proceed.",
    "Yes, cancel it \u2014 I don\u2019t need it anymore.",  # a negation that gives a reason
    "Yes, I don't need the insurance, just book it.",
    "Yes, I'm sure.",
    "Yes, the address is correct.",
    "Yes, and please also update my default address afterwards.",
    "Sure, why not.",
]

NOT_CONSENT = [
    "No",
    "No.",
    "Nope.",
    "Nah, leave it as it is.",
    "No, I do not confirm.",
    "No, I do not confirm",
    "I do not confirm.",
    "I don\u2019t agree to that.",
    "Don't do that.",
    "Please don't.",
    "Not yet.",
    "Not now, thanks.",
    "Definitely not!",
    "Absolutely not.",
    "Of course not.",
    "That's not correct.",
    "That's not what I asked for.",
    "I'm not sure.",
    "I'm not sure, let me think about it.",
    "Can you confirm the price first?",
    "Can you confirm the price first",  # a question without its mark
    "Wait, is that refundable?",
    "Wait.",
    "Hold on, let me check my email.",
    "Hang on a second.",
    "Stop.",
    "Never mind.",
    "Actually, I changed my mind.",
    "Yes. Actually, wait \u2014 what's the refund?",
    "Yes but not the second one.",
    "Yes please, but only the first one.",
    "Yes, except the blue one.",
    "Only if there's no fee.",
    "Yes if it's refundable.",
    "Yes. Is it refundable?",
    "What is the total?",
    "Is that the cheapest option?",
    "Could you tell me the total before you proceed?",
    "Please confirm the total before proceeding.",
    "I'll confirm later.",
    "I want to confirm my reservation details.",
    "Make sure the refund goes to my credit card.",
    "I want to cancel order #W2890441.",  # a request states the goal; consent answers a proposal
    "Hi, I need some help with my account.",
    "Thank you, bye.",
    "I'd rather keep it.",
    "Sure, but first tell me the new price.",
    "",
]


@pytest.mark.parametrize("reply", CONSENT)
def test_consent(reply: str) -> None:
    assert says_yes(reply)


@pytest.mark.parametrize("reply", NOT_CONSENT)
def test_no_consent(reply: str) -> None:
    assert not says_yes(reply)


def test_the_table_is_realistic() -> None:
    assert len(CONSENT) + len(NOT_CONSENT) >= 80 and not set(CONSENT) & set(NOT_CONSENT)


REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("reply", "confirmed"), [("No, I do not confirm.", False), ("Yes, I confirm.", True)])
def test_the_environments_confirmed_fact_follows_the_reply(reply: str, confirmed: bool) -> None:
    program = load_environment(str(REPO / "examples" / "envs" / "structured_data_reasoning.rubric"))
    env = CapabilityEnvironment(program, user=ScriptedUser(then=reply))
    env.reset(0)
    env.step("Shall I cancel the trip?")
    call = env.scenario.gold_calls[-1]
    env.step(format_tool_call(call.name, call.arguments))
    assert env.actions[-1]["kind"] == "mutate" and env.actions[-1]["confirmed"] is confirmed
