"""The benchmark's score: DB hash against the gold replay, times every communicate_info string said."""

from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.tau2.env import Tau2Tools
from tracec.trace_rl.envs.tau2.environment import Tau2Environment, scripted_user
from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user, replay_gold
from tracec.trace_rl.envs.tau2.scoring import Score, communicated, score
from tracec.trace_rl.envs.toolcall import ToolCall, format_tool_call


class Script:
    """An agent that says fixed turns, then keeps saying goodbye."""

    def __init__(self, *turns):
        self.turns = list(turns)

    def act(self, messages):
        return self.turns.pop(0) if self.turns else "Goodbye."


def play(domain, task, agent, lines):
    """One episode of `task` with a scripted user saying `lines`; the environment after it."""
    env = Tau2Environment(domain, user=scripted_user(lines), task_ids=[task.id])
    run_episode(env, agent, 0, env.max_steps)
    return env


def test_communicated_ignores_case_and_commas():
    assert communicated("8276.23", ["Your refund is $8,276.23."])
    assert communicated("Economy", ["you fly ECONOMY"])
    assert communicated("1,286", ["the total is 1286 dollars"])
    assert not communicated("8276.23", ["Your refund is $8276.2"])
    assert not communicated("10", [])


def test_reward_is_db_times_every_communicate_check():
    assert Score(db_match=True, communicated=()).reward == 1.0
    assert Score(db_match=True, communicated=(True, True)).reward == 1.0
    assert Score(db_match=True, communicated=(True, False)).reward == 0.0
    assert Score(db_match=False, communicated=(True,)).reward == 0.0


def test_score_compares_the_final_database_with_the_gold_replay(domains):
    domain = domains["retail"]
    task = domain.task("16")
    gold, _ = replay_gold(domain, task)
    fresh = Tau2Tools(domain).db
    assert score(task, fresh, ["8276.23"], gold=gold.db) == Score(db_match=False, communicated=(True,))
    assert fresh.stable_hash() != gold.db.stable_hash()
    done, _ = replay_gold(domain, task)
    assert done.db.stable_hash() == gold.db.stable_hash() and done.db.same_as(gold.db)
    assert score(task, done.db, ["refund: $8,276.23"], gold=gold.db).reward == 1.0
    assert score(task, done.db, ["refund: 8276"], gold=gold.db).reward == 0.0


def test_a_wrong_action_changes_the_hash_and_scores_zero(domains):
    domain = domains["retail"]
    task = domain.task("0")  # exchange two items of #W2378156
    exchange = task.actions[-1]
    gold_new = exchange.arguments["new_item_ids"]
    keyboards = domain.snapshot.tables["products"]["1656367028"]["variants"].values()
    other = next(
        v["item_id"] for v in keyboards if v["available"] and v["item_id"] not in gold_new + ["1151293680"]
    )
    wrong = dict(exchange.arguments, new_item_ids=[other, gold_new[1]])
    wrong_item = dict(
        exchange.arguments,
        item_ids=exchange.arguments["item_ids"][:1],
        new_item_ids=exchange.arguments["new_item_ids"][:1],
    )
    for arguments in (wrong, wrong_item):
        agent = Script(format_tool_call(exchange.name, arguments), "Done.")
        env = play(domain, task, agent, ["Please exchange my items."])
        assert env.actions[0]["accepted"], env.states[1].get("last_error")
        assert env.score().reward == 0.0 and not env.score().db_match
        gold, _ = replay_gold(domain, task)
        assert _final_hash(domain, task, arguments) != gold.db.stable_hash()
    right = play(
        domain, task, Script(format_tool_call(exchange.name, exchange.arguments), "Done."),
        ["Please exchange my items."],
    )
    assert right.score().reward == 1.0


def _final_hash(domain, task, arguments):
    env = Tau2Tools(domain)
    for action in task.actions[:-1]:
        env.execute(ToolCall(name=action.name, arguments=action.arguments))
    env.execute(ToolCall(name=task.actions[-1].name, arguments=arguments))
    return env.db.stable_hash()


def test_the_right_actions_without_the_information_score_zero(domains):
    domain = domains["retail"]
    task = domain.task("16")
    calls = [format_tool_call(action.name, action.arguments) for action in task.actions]
    silent = play(domain, task, Script(*calls, "All done."), ["Hi."])
    assert silent.score() == Score(db_match=True, communicated=(False,))
    told = play(domain, task, Script(*calls, "Total refund: $8,276.23"), ["Hi."])
    assert told.score().reward == 1.0


def test_doing_nothing_scores_by_the_task(domains):
    idle = Script("I cannot help with that.")
    refuse_only = domains["airline"].task("0")  # the agent should refuse: no action, nothing to say
    assert not refuse_only.actions and not refuse_only.communicate_info
    assert play(domains["airline"], refuse_only, idle, ["Cancel EHGLP3."]).score().reward == 1.0
    cancel = domains["airline"].task("23")
    assert play(domains["airline"], cancel, Script("No."), ["Hi."]).score().reward == 0.0


def test_gold_agent_scores_one_with_the_gold_user(domains):
    domain = domains["airline"]
    task = domain.task("14")  # communicates three amounts
    env = Tau2Environment(domain, user=gold_user(), task_ids=["14"])
    record = run_episode(env, GoldAgent(env), 0, env.max_steps)
    assert task.communicate_info and record["env_reward"] == 1.0 and record["end"] == "stop"
