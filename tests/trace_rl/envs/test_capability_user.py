"""An LLM user in capability environments: the episode routes the agent's messages to it, its replies become the
agent's observations, and the episode ends when it ends the conversation; the trainer's `env.capability.user` and
the pipeline's `target.user` make it. The user's chat backend is a small fake; the environment, its episode and the
`LLMUser` are the real ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.config import CapabilityEnvSection, EnvSection
from tracec.trace_rl.envs.registry import environment_factory
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.envs.users import STOP, LLMUser, ScriptedUser
from tracec.trace_rl.grpo.config import ConfigError, config_from_dict
from tracec.trace_rl.targeting.pipeline.config import TargetSection
from tracec.trace_rl.targeting.pipeline.targets import target_domains

REPO = Path(__file__).resolve().parents[3]
CANCEL = REPO / "examples" / "envs" / "precondition_verification.rubric"


class Customer:
    """A chat backend with canned replies, keeping every conversation it was shown."""

    def __init__(self, *replies: str) -> None:
        self.replies, self.seen = list(replies), []  # type: ignore[var-annotated]

    def generate(self, messages: list[dict[str, str]]) -> str:
        self.seen.append([dict(m) for m in messages])
        return self.replies.pop(0)


def test_the_agent_s_messages_reach_the_llm_user_and_its_replies_come_back_until_it_stops() -> None:
    customer = Customer("It is the one I ordered by mistake.", f"Great, thanks! {STOP}")
    env = CapabilityEnvironment(load_environment(str(CANCEL)), user=LLMUser(customer), call_format="text")
    opening = env.reset(2)
    assert env.scenario is not None and opening.role == "user" and opening.text == env.scenario.task
    first = env.step("Which of the two orders do you mean?")
    assert (first.observation.role, first.observation.text, first.done) == (
        "user", "It is the one I ordered by mistake.", False)
    # The user saw its task as its system prompt, its own opening, then the agent's message (roles flipped).
    system, said, asked = customer.seen[0]
    assert env.scenario.task in system["content"] and STOP in system["content"]
    assert (said, asked) == ({"role": "assistant", "content": env.scenario.task},
                             {"role": "user", "content": "Which of the two orders do you mean?"})
    for call in env.scenario.gold_calls:  # tool calls go to the tables, not to the user
        assert env.step(format_tool_call(call.name, call.arguments)).observation.role == "tool"
    assert len(customer.seen) == 1
    last = env.step("I cancelled the pending order; the other one is untouched.")
    assert (last.observation.text, last.done, last.reward) == ("Great, thanks!", True, 1.0)  # the user ended it
    assert customer.seen[1][-1] == {"role": "user", "content": "I cancelled the pending order; the other one is "
                                                               "untouched."}
    assert env.trajectory("llm-user")["states"][-1]["user_msg"] == "Great, thanks!"


def test_a_user_that_never_stops_leaves_the_end_to_the_step_limit() -> None:
    customer = Customer(*["Please go on."] * 3)
    env = CapabilityEnvironment(load_environment(str(CANCEL)), user=LLMUser(customer), max_steps=3, call_format="text")
    env.reset(0)
    results = [env.step(f"message {i}") for i in range(3)]
    assert [r.done for r in results] == [False, False, True] and len(customer.seen) == 3


def test_the_trainer_and_the_pipeline_make_the_capability_user_from_their_config() -> None:
    scripted: Any = environment_factory(EnvSection(capability=CapabilityEnvSection(path=str(CANCEL))))()
    assert isinstance(scripted.user, ScriptedUser)  # the default for tests and training
    llm = environment_factory(EnvSection(capability=CapabilityEnvSection(path=str(CANCEL), user="llm",
                                                                         user_model="tiny")))
    first, second = llm(), llm()
    assert isinstance(first, CapabilityEnvironment) and isinstance(second, CapabilityEnvironment)
    assert isinstance(first.user, LLMUser) and first.user is not second.user  # one conversation each
    with pytest.raises(ConfigError, match=r'env\.capability\.user = "robot": choose one of "scripted", "llm"'):
        config_from_dict({"env": {"capability": {"path": str(CANCEL), "user": "robot"}}})
    customer = Customer(f"Thanks. {STOP}")
    target = TargetSection(environments=(str(CANCEL),), user="base")
    (domain,) = target_domains(target, first_seed=0, tasks=1, user=customer)
    env = domain.make_env()
    assert isinstance(env, CapabilityEnvironment)
    env.reset(0)
    assert env.step("All done.").done and customer.seen
    with pytest.raises(ConfigError, match="target.user = \"base\" needs the base model"):
        target_domains(target, first_seed=0, tasks=1)
    (plain,) = target_domains(TargetSection(environments=(str(CANCEL),)), first_seed=0, tasks=1, user=customer)
    made: Any = plain.make_env()
    assert isinstance(made.user, ScriptedUser)
