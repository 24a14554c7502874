"""TRACE on the TextWorld family: needs from the gold plan, labels from the plan's chances, capability environments,
routing and the base agent, on real TextWorld games."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.textworld.agents import RandomAgent, WalkthroughAgent
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment, TaskFamily
from tracec.trace_rl.experiments.learning_curve import Setup
from tracec.trace_rl.experiments.trace_conditions import NeedProbe, oracle_route, route, routed_wins
from tracec.trace_rl.experiments.trace_experiment import TraceBudget, TraceExperiment, check_stage, saved_by_key
from tracec.trace_rl.experiments.trace_family import (
    CAPABILITIES,
    LabelledEpisode,
    SeedListEnvironment,
    capability_of,
    episode_labels,
    gold_plan,
    needs,
    run_buckets,
    seeds_needing,
)

from tracec.config_io import ConfigError

FAMILY = TaskFamily(quest_lengths=(2, 3, 4), max_turns=8, train_seeds=tuple(range(6)), eval_seeds=(200_000,))


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    cache = tmp_path_factory.getbasetemp().parent / "trace-family-games"
    return FAMILY.prepare(FAMILY.train_seeds, cache)


def test_a_tasks_needs_are_its_gold_plans_kinds_whatever_an_agent_plays(games: dict[int, Path]) -> None:
    env = FamilyEnvironment(FAMILY, next(iter(games.values())).parent.parent, list_commands=False)
    try:
        for seed, path in games.items():
            env.reset(seed)
            plan = gold_plan(path)
            assert plan == env.policy_commands  # the game file's walkthrough is the plan from the opening state
            assert needs(plan) == {capability_of(command.split()[0]) for command in plan}
            for i in range(2):  # what random play does leaves the task's needs alone
                record = run_episode(env, RandomAgent(env, seed=i), seed, FAMILY.max_turns, episode=f"r{i}")
                labels = episode_labels(plan, record)
                assert {name for name, label in labels.items() if label != "NA"} == needs(plan)
            walk = run_episode(env, WalkthroughAgent(env), seed, FAMILY.max_turns, episode="walk")
            assert walk["plan_next"] == list(plan)
            assert {name for name, label in episode_labels(plan, walk).items() if label == "PRESENT"} == needs(plan)
    finally:
        env.close()


def _trajectory(steps: list[tuple[str, bool]]) -> dict[str, object]:
    return {"plan_next": [planned for planned, _ in steps], "on_plan": [taken for _, taken in steps],
            "actions": [{"verb": planned.split()[0]} for planned, _ in steps]}


def test_a_capability_is_present_when_its_chances_were_taken_as_often_as_the_plan_needs_and_missed_no_more() -> None:
    plan = ("go east", "unlock box with key", "open box")
    straight = _trajectory([("go east", True), ("unlock box with key", True), ("open box", True)])
    assert episode_labels(plan, straight) == {name: "PRESENT" if name in {"navigate", "unlock", "open"} else "NA"
                                              for name in CAPABILITIES}
    # a win after wandering: two chances to go east missed before the third was taken
    wandering = _trajectory([("go east", False), ("go east", False), ("go east", True),
                             ("unlock box with key", True), ("open box", True)])
    assert episode_labels(plan, wandering)["navigate"] == "LACKING"
    assert episode_labels(plan, wandering)["unlock"] == "PRESENT"
    # one miss, then the chance taken: as many taken as missed is still present
    assert episode_labels(plan, _trajectory([("go east", False), ("go east", True)]))["navigate"] == "PRESENT"
    # never reached: the plan's unlock was never the next command, so it was never shown
    stuck = _trajectory([("go east", False)] * 8)
    assert episode_labels(plan, stuck)["unlock"] == "LACKING"
    assert episode_labels(plan, stuck)["eat"] == "NA"


def test_run_buckets_put_each_needed_label_of_each_episode_in_one_bucket_and_na_in_none() -> None:
    episodes = [LabelledEpisode("1.0", 1, True, {"navigate": "PRESENT", "eat": "NA"}),
                LabelledEpisode("1.1", 1, False, {"navigate": "LACKING", "eat": "NA"}),
                LabelledEpisode("2.0", 2, False, {"navigate": "PRESENT", "eat": "LACKING"})]
    buckets = run_buckets(episodes)
    assert buckets["navigate"] == {"present_passed": ["1.0"], "lacking_failed": ["1.1"], "present_failed": ["2.0"]}
    assert buckets["eat"] == {"lacking_failed": ["2.0"]}
    assert buckets["unlock"] == {}


def test_a_capability_environment_plays_only_games_that_need_its_capability(games: dict[int, Path]) -> None:
    cache = next(iter(games.values())).parent.parent
    for name in ("navigate", "take"):
        chosen = seeds_needing(FAMILY, games, name)
        assert chosen == [s for s in sorted(games) if name in needs(gold_plan(games[s]))]
    chosen = sorted(games)[2:5]
    env = SeedListEnvironment(FamilyEnvironment(FAMILY, cache, list_commands=False), chosen)
    try:
        for index in range(2 * len(chosen)):  # the trainer's task index i plays game chosen[i mod n]
            env.reset(index)
            assert env.policy_commands == gold_plan(games[chosen[index % len(chosen)]])
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown capability"):
        seeds_needing(FAMILY, games, "fly")


def test_routing_sends_a_task_to_the_highest_ranked_capability_it_is_said_to_need_or_keeps_base() -> None:
    capabilities = ["navigate", "open", "unlock"]
    ranked = ["unlock", "navigate"]  # selection's order; open was not kept
    probabilities = np.array([[0.9, 0.2, 0.7],   # both kept ones needed: the higher-ranked, unlock
                              [0.9, 0.9, 0.1],   # only navigate of the kept ones
                              [0.2, 0.4, 0.3]])  # none above 1/2: the base agent alone
    assert route(probabilities, ranked, capabilities) == ["unlock", "navigate", None]
    plans = [("go east", "unlock box with key"), ("take apple",), ("go west", "open door")]
    assert oracle_route(plans, ranked, needs) == ["unlock", None, "navigate"]


def test_the_routed_condition_plays_each_task_with_its_routed_adapter() -> None:
    per_adapter = {name: np.full((4, 3), float(i)) for i, name in enumerate([None, "a", "b"])}
    per_adapter["a"][2] = [7.0, 7.0, 8.0]
    wins = routed_wins(per_adapter, ["a", None, "a", "b"])
    assert wins.tolist() == [[1.0] * 3, [0.0] * 3, [7.0, 7.0, 8.0], [2.0] * 3]


def test_the_need_probe_recovers_needs_that_its_features_separate() -> None:
    rng = np.random.default_rng(0)
    needed = [frozenset(n for n, on in zip(("a", "b"), rng.random(2) < 0.5) if on) for _ in range(80)]
    features = np.array([[("a" in n) * 2.0, ("b" in n) * 2.0, 0.0] for n in needed]) + rng.normal(0, 0.3, (80, 3))
    probe = NeedProbe.fit(features, needed, ["a", "b"])
    predicted = probe.probabilities(features) >= 0.5
    assert (predicted == np.array([[c in n for c in ("a", "b")] for n in needed])).mean() > 0.95


@pytest.mark.slow
def test_the_base_agent_is_its_training_runs_adapter_folded_into_the_weights(games: dict[int, Path],
                                                                                tmp_path: Path) -> None:
    import json

    import torch
    from safetensors.torch import load_file
    from tracec.trace_rl.experiments.learning_curve import RunSpec, Setup
    from tracec.trace_rl.experiments.small_policy import build_small_policy, vocabulary_texts
    from tracec.trace_rl.experiments.trace_conditions import save_base_agent
    from tracec.trace_rl.policy.model import Policy

    cache = next(iter(games.values())).parent.parent
    small = build_small_policy(vocabulary_texts(FAMILY, [games[s] for s in FAMILY.train_seeds]), tmp_path / "small",
                               hidden=32, layers=1)
    setup = Setup(family=FAMILY, games=cache, small_policy=small, rubric=tmp_path / "unused.rubric")
    # the oracle credit: every group carries signal, so one iteration moves the adapter
    spec = RunSpec(method="oracle", model=str(small), iterations=1, eval_every=1, group_size=2, groups_per_batch=2,
                   lr=5e-2, seed=3)
    base = save_base_agent(setup, spec, tmp_path / "base")
    how = json.loads((base / "base_agent.json").read_text())
    assert how["trained_from"] == str(small) and how["rollouts"] == 4 and how["method"] == "oracle"
    adapter = load_file(str(tmp_path / "base" / "run" / "checkpoints" / "iter_000001" / "adapter" /
                            "adapter_model.safetensors"))
    trained = Policy.load(str(small), spec.lora)
    trained.load_adapter_state(adapter)
    folded = Policy.load(str(base), spec.lora)
    ids = torch.tensor([folded.tokenizer("Objective: take the apple. Room: kitchen")["input_ids"]])
    with torch.no_grad():
        expected, got = trained.model(input_ids=ids).logits, folded.model(input_ids=ids).logits
        untrained = Policy.load(str(small), spec.lora).model(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)  # fp32, one layer of width 32: rounding only
    assert not torch.allclose(got, untrained, atol=1e-3)  # the training moved it
    assert save_base_agent(setup, spec, tmp_path / "base") == base  # made once: a second call reads it back


def test_a_stage_folder_is_reused_with_its_own_settings_and_refused_with_others_naming_them(tmp_path: Path) -> None:
    folder = tmp_path / "base-agent-8-validation"
    check_stage(folder, {"adapter_iterations": 8, "pool_lengths": (1, 2)})
    check_stage(folder, {"adapter_iterations": 8, "pool_lengths": (1, 2)})  # a rerun: its stages read back
    with pytest.raises(ConfigError, match=r"base-agent-8-validation: .*adapter_iterations=8; this run asks "
                                          r"adapter_iterations=16"):
        check_stage(folder, {"adapter_iterations": 16, "pool_lengths": (1, 2)})
    with pytest.raises(ConfigError, match=r"made with lr=None; this run asks lr=0.001"):
        check_stage(folder, {"adapter_iterations": 8, "pool_lengths": (1, 2), "lr": 1e-3})


def test_an_experiment_refuses_a_workdir_whose_base_agent_was_trained_with_another_budget(tmp_path: Path) -> None:
    setup = Setup(family=FAMILY, games=tmp_path / "games", small_policy=tmp_path / "policy",
                  rubric=tmp_path / "textworld.rubric")
    made = {"model": "", "lr": 2e-3, "groups": 8, "group_size": 8, "quest_lengths": [2, 3, 4], "max_turns": 8,
            "train_seeds": [0, 6]}
    check_stage(tmp_path / "base-agent-8", made)
    with pytest.raises(ConfigError, match="group_size=8; this run asks group_size=4"):  # before any training
        TraceExperiment(setup, TraceBudget(group_size=4), tmp_path, split="validation")
    assert not (tmp_path / "base-agent-8" / "base_agent.json").exists()


def test_a_value_saved_by_its_settings_is_read_back_for_the_same_settings_tuples_included(tmp_path: Path) -> None:
    computed = []

    def compute(value: str) -> str:
        computed.append(value)
        return value
    path = tmp_path / "base-agent-8-calibration.json"
    assert saved_by_key(path, {"pool_lengths": (1, 2), "env_turns": 4}, lambda: compute("four")) == "four"
    assert saved_by_key(path, {"pool_lengths": (1, 2), "env_turns": 4}, lambda: compute("again")) == "four"
    assert saved_by_key(path, {"pool_lengths": (1, 2), "env_turns": 8}, lambda: compute("eight")) == "eight"
    assert computed == ["four", "eight"]  # the second call read the first's value back, not computing it again
