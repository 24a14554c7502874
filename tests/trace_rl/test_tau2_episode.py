"""The tau2 environment's conversation, the LLM user simulator's prompt, and the trajectory facts of tau2 episodes."""

import json

import pytest
from tracec.runtime.facts.trajectories.records import write_records
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.tau2.environment import (
    GREETING,
    Tau2Environment,
    load_guidelines,
    scripted_user,
    tau2_user,
)
from tracec.trace_rl.envs.tau2.gold import CONSENT, GoldAgent, gold_user
from tracec.trace_rl.envs.tau2.tasks import load_split

ACTION_FACTS = {"tool", "kind", "accepted", "args", "target", "confirmed", "text"}
STATE_FACTS = {"revealed", "checked", "last_error", "user_msg", "db_changed", "n_errors"}


class Script:
    def __init__(self, *turns):
        self.turns = list(turns)
        self.seen = []

    def act(self, messages):
        self.seen.append(messages)
        return self.turns.pop(0) if self.turns else "Goodbye."


class FakeModel:
    """A backend that records what it was asked and answers from a list."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def generate(self, messages):
        self.calls.append(messages)
        return self.answers.pop(0)


def test_the_gold_agent_scores_one_on_every_task(domains):
    scored = 0
    for domain in domains.values():
        env = Tau2Environment(domain, user=gold_user())
        agent = GoldAgent(env)
        for seed, task in enumerate(domain.tasks.values()):
            record = run_episode(env, agent, seed, env.max_steps)
            assert record["task"] == task.key and env.task is task
            assert record["env_reward"] == 1.0 and record["success"], (task.key, env.score())
            assert record["end"] == "stop"
            scored += bool(task.actions or task.communicate_info)
        assert set(env.gold) == set(domain.tasks)  # each task's gold replayed once, for all its episodes
    assert scored == 43 + 113


def test_gold_trajectory_facts(domains):
    domain = domains["retail"]
    task = domain.task("2")  # two product lookups fail, then a return to the original method
    env = Tau2Environment(domain, user=gold_user(), task_ids=["2"])
    record = run_episode(env, GoldAgent(env), 0, env.max_steps, episode="retail-2-gold")
    states, actions = record["states"], record["actions"]
    assert len(states) == len(actions) + 1 and record["task"] == "retail/2" and record["success"] is True
    assert all(set(a) <= ACTION_FACTS for a in actions) and all(set(s) <= STATE_FACTS for s in states)
    assert [a["kind"] for a in actions].count("mutate") == 1 and actions[-1]["kind"] == "message"
    lookup = actions[0]
    assert lookup == {
        "tool": "find_user_id_by_name_zip",
        "kind": "query",
        "accepted": True,
        "args": sorted(task.actions[0].arguments.values()),
        "confirmed": False,
        "text": lookup["text"],
    }
    assert states[1]["checked"] and states[1]["revealed"] and not states[1]["db_changed"]
    failed = next(i for i, a in enumerate(actions) if not a["accepted"])
    assert (
        actions[failed]["target"] == "6086499569" and states[failed + 1]["last_error"] == "Product not found"
    )
    assert states[failed + 1]["n_errors"] == 1 and not states[failed + 1]["checked"]
    assert "last_error" not in states[failed + 2]
    mutate = next(i for i, a in enumerate(actions) if a["kind"] == "mutate")
    assert actions[mutate]["confirmed"] and actions[mutate]["accepted"]
    assert actions[mutate - 1]["kind"] == "message" and states[mutate]["user_msg"] == CONSENT
    assert states[mutate + 1]["db_changed"] and states[-1]["n_errors"] == 1
    assert actions[mutate]["target"] in states[mutate]["revealed"], (
        "the order was looked up before the return"
    )


def test_malformed_and_unknown_calls_are_invalid_steps(domains):
    domain = domains["airline"]
    agent = Script(
        "<action>get_user_details(user_id=</action>",
        "<action>fly_me(to=moon)</action>",
        '{"name": "get_user_details", "arguments": {"user_id": "emma_kim_9957"}}',
        '{"name": "get_user_details", "arguments": {"user_id": ' + "[" * 500 + "]" * 500 + "}}",
        "Bye!",
    )
    env = Tau2Environment(domain, user=scripted_user(["Hi, I am emma_kim_9957."]), task_ids=["0"],
                          call_format="text")  # the prompt's text format is checked below
    record = run_episode(env, agent, 0, env.max_steps, episode="e1")
    kinds = [a["kind"] for a in record["actions"]]
    assert kinds == ["invalid", "invalid", "query", "query", "message"]
    assert not record["actions"][3]["accepted"] and record["actions"][3]["args"] == []
    assert "tool" not in record["actions"][0] and record["actions"][1]["tool"] == "fly_me"
    assert record["states"][2]["n_errors"] == 2 and "not found" in record["states"][2]["last_error"]
    assert record["states"][3]["checked"] and "emma_kim_9957" in record["states"][3]["revealed"]
    assert record["actions"][2]["target"] == "emma_kim_9957"
    tool_messages = [m for m in agent.seen[-1] if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("Error: could not read the tool call")
    assert agent.seen[0][0]["role"] == "system" and "## Tools" in agent.seen[0][0]["content"]
    assert "get_user_details(user_id: str)" in agent.seen[0][0]["content"]
    assert agent.seen[0][1] == {"role": "user", "content": "Hi, I am emma_kim_9957."}  # the greeting is the user's
    assert record["end"] == "stop" and record["states"][-1]["user_msg"] == "###STOP###"


def test_llm_user_sees_the_scenario_and_flipped_roles(domains, data_dir):
    domain = domains["retail"]
    model = FakeModel("Hi, I want to exchange a keyboard.", "Yes, go ahead.", "Thanks! ###TRANSFER###")
    user = tau2_user(model, guidelines=load_guidelines(data_dir))
    env = Tau2Environment(domain, user=user, task_ids=["0"])
    agent = Script(
        "Sure, what is your zip?", "<action>get_order_details(order_id=#W2378156)</action>", "Done."
    )
    record = run_episode(env, agent, 0, env.max_steps)
    assert record["end"] == "transfer" and len(model.calls) == 3
    assert record["states"][-1]["user_msg"] == "Thanks! ###TRANSFER###"  # as the benchmark records it
    system = model.calls[0][0]
    assert (
        system["role"] == "system" and "###STOP###" in system["content"] and "#W2378156" in system["content"]
    )
    last = model.calls[-1][1:]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert last[0]["content"] == GREETING and last[-1]["content"] == "Done."
    assert all("<action>" not in m["content"] for m in last), "the user never sees tool calls"


def test_max_steps_ends_an_agent_that_never_stops(domains):
    domain = domains["airline"]
    busy = Script(*["<action>list_all_airports()</action>"] * 10)
    env = Tau2Environment(domain, user=scripted_user(["Hi."]), task_ids=["0"], max_steps=4)
    record = run_episode(env, busy, 0, 10)
    assert record["end"] == "max_steps" and len(record["actions"]) == 4 and env.done
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("<action>list_all_airports()</action>")
    with pytest.raises(ValueError, match="max_steps"):
        Tau2Environment(domain, user=scripted_user([]), max_steps=0)


def test_trajectories_are_written_as_jsonl(domains, tmp_path):
    domain = domains["airline"]
    env = Tau2Environment(domain, user=gold_user(), task_ids=["1", "2"])
    records = [run_episode(env, GoldAgent(env), seed, env.max_steps, episode=str(seed + 1)) for seed in (0, 1)]
    path = tmp_path / "tau2.jsonl"
    write_records(records, path)
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == records
    assert [p.name for p in tmp_path.iterdir()] == ["tau2.jsonl"]


def test_splits(data_dir, domains):
    for name, domain in domains.items():
        train, test = load_split(name, data_dir, "train"), load_split(name, data_dir, "test")
        assert not set(train) & set(test) and set(train) | set(test) == set(domain.tasks)
    with pytest.raises(ValueError, match="no split `dev`"):
        load_split("airline", data_dir, "dev")


def test_the_seed_picks_the_task_in_the_order_given(domains):
    domain = domains["airline"]
    env = Tau2Environment(domain, user=gold_user(), task_ids=["5", "3"])
    assert [env.task_for(seed).id for seed in range(5)] == ["5", "3", "5", "3", "5"]
    env.reset(3)
    assert env.task.id == "3" and env.trajectory("e")["task"] == "airline/3"
    assert [t.id for t in Tau2Environment(domain, user=gold_user()).tasks] == list(domain.tasks)
    with pytest.raises(KeyError, match="no task `nope` in the airline domain"):
        Tau2Environment(domain, user=gold_user(), task_ids=["nope"])
    with pytest.raises(ValueError, match="no tasks to play"):
        Tau2Environment(domain, user=gold_user(), task_ids=[])
    with pytest.raises(RuntimeError, match="call reset"):
        Tau2Environment(domain, user=gold_user()).step("hello")
