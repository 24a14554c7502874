"""The learning setup: the TextWorld task family (real games), the small policy, the curves, and `tracec demo`.

The games are real TextWorld games made by its generator and Inform 7 (a few, shared by the tests of a run). The
demo's end-to-end run through the command line is in tests/cli/test_cli.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.textworld.agents import RandomAgent, WalkthroughAgent
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment, TaskFamily, family_texts
from tracec.trace_rl.experiments.demo import DEMO_FAMILY, EVAL_SEED_BASE, demo_family
from tracec.trace_rl.experiments.learning_curve import (
    Curve,
    CurvePoint,
    RunSpec,
    Setup,
    curve_band,
    rollouts_to_reach,
    rubric_variant,
    run_config,
    start_run_folder,
)
from tracec.trace_rl.experiments.learning_stats import success_interval
from tracec.trace_rl.experiments.small_policy import build_word_tokenizer, unknown_share

FAMILY = demo_family(train_games=3, eval_games=1)


@pytest.fixture(scope="session")
def family_games(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The games of FAMILY, made once a run (the folder is shared by xdist workers; publishing is atomic)."""
    cache = tmp_path_factory.getbasetemp().parent / "family-games"
    FAMILY.prepare(list(FAMILY.train_seeds) + list(FAMILY.eval_seeds), cache)
    return cache


def test_the_held_out_seeds_are_never_training_seeds() -> None:
    for family in (DEMO_FAMILY, TaskFamily(), demo_family(EVAL_SEED_BASE, 5)):
        assert family.train_seeds and family.eval_seeds
        assert not set(family.train_seeds) & set(family.eval_seeds)
    with pytest.raises(ValueError, match="both training and evaluation seeds"):
        TaskFamily(train_seeds=(1, 2, 3), eval_seeds=(3, 4))
    with pytest.raises(ValueError, match="train_games"):
        demo_family(EVAL_SEED_BASE + 1, 5)


def test_the_trainer_only_ever_draws_training_seeds(tmp_path: Path) -> None:
    from tracec.trace_rl.experiments.learning_curve import Setup
    from tracec.trace_rl.grpo.task_stream import TaskStream

    setup = Setup(family=DEMO_FAMILY, games=tmp_path, small_policy=tmp_path, rubric=tmp_path / "r.rubric")
    config = run_config(RunSpec(method="grpo", model="tiny"), setup, tmp_path / "run")
    stream = TaskStream(config.env.first_seed, config.env.num_seeds, config.run.seed)
    drawn = set(stream.take(10 * len(DEMO_FAMILY.train_seeds)))
    assert drawn == set(DEMO_FAMILY.train_seeds)  # every training game, and nothing else
    assert config.advantage.max_resample_batches == 0  # both methods spend exactly the rollouts they are given


def test_a_family_game_is_won_by_its_walkthrough_and_rewarded_sparsely(family_games: Path) -> None:
    env = FamilyEnvironment(FAMILY, family_games, list_commands=False)
    try:
        seed = FAMILY.train_seeds[1]
        first = env.reset(seed).text
        assert first.startswith("Objective: ") and "\nRoom: " in first and "Commands:" not in first
        assert env.admissible_commands  # what the admissible action mode chooses from
        walk = run_episode(env, WalkthroughAgent(env), seed, FAMILY.max_turns, episode="walk")
        assert walk["success"] and walk["env_reward"] == 1.0 and walk["game_score"] == 1.0
        assert len(walk["actions"]) == FAMILY.quest_length(seed) or len(walk["actions"]) <= FAMILY.max_turns
        assert walk["instruction"] == walk["instruction"].lower()
        assert walk["on_plan"] == [True] * len(walk["actions"])  # the oracle credit's record: every step on the plan
        randoms = [run_episode(env, RandomAgent(env, seed=i), seed, FAMILY.max_turns, episode=f"r{i}")
                   for i in range(4)]
        assert not all(all(r["on_plan"]) for r in randoms)  # random play leaves the plan
        for record in randoms:  # sparse: a win is 1, anything else 0, whatever points the game gave
            assert record["env_reward"] == (1.0 if record["success"] else 0.0)
            assert 0.0 <= record["game_score"] <= 1.0
    finally:
        env.close()


def test_the_goal_objective_names_the_last_act_and_none_of_the_steps(family_games: Path) -> None:
    goal_family = dataclasses.replace(FAMILY, objective="goal")  # the same games
    steps, goal = FamilyEnvironment(FAMILY, family_games), FamilyEnvironment(goal_family, family_games)
    try:
        for seed in FAMILY.train_seeds:
            steps.reset(seed)
            plan = steps.policy_commands
            first = goal.reset(seed).text
            assert first.startswith(f"Objective: Your goal: {plan[-1]}")
            assert goal.policy_commands == plan  # the objective's text changed, not the game or its state
            walk = run_episode(goal, WalkthroughAgent(goal), seed, FAMILY.max_turns, episode="walk")
            assert walk["success"] and walk["instruction"] == goal.objective.lower()
            if len(plan) > 1:  # what the steps' objective spells out (a way, a container opened) the goal does not
                assert any(command.split()[0] in {"go", "open", "take"} for command in plan[:-1])
                assert not any(f"{command} " in walk["instruction"] for command in plan[:-1])
    finally:
        steps.close()
        goal.close()
    with pytest.raises(ValueError, match="objective='hint'"):
        dataclasses.replace(FAMILY, objective="hint")


def test_the_small_policy_tokenizer_is_exact_on_the_games_and_covers_held_out_ones(family_games: Path) -> None:
    from tracec.trace_rl.experiments.small_policy import grammar_texts

    train = [FAMILY.game_file(s, family_games) for s in FAMILY.train_seeds]
    held_out = [FAMILY.game_file(s, family_games) for s in FAMILY.eval_seeds]
    tokenizer = build_word_tokenizer(grammar_texts() + family_texts(FAMILY, train))
    texts = family_texts(FAMILY, train)
    for text in texts[1:40]:
        normal = " ".join(text.lower().split())
        ids = tokenizer(normal, add_special_tokens=False)["input_ids"]
        if tokenizer.unk_token_id not in ids:
            assert tokenizer.decode(ids) == normal
    assert unknown_share(tokenizer, family_texts(FAMILY, held_out)) < 0.02  # the grammars name what games show
    ids = tokenizer("<action>take the key</action>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids)[0] == "<action>"


def test_no_context_grouping_makes_each_task_group_one_step_group(tmp_path: Path) -> None:
    from tracec.trace_rl.experiments.demo_settings import shipped_examples

    rubric = shipped_examples() / "textworld.rubric"
    assert rubric_variant(rubric, tmp_path, context_grouping=True) == rubric
    variant = rubric_variant(rubric, tmp_path, context_grouping=False)
    text = variant.read_text()
    assert "context true" in text and "context prev.location" not in text
    from tracec.compiler.load import load_rubric

    load_rubric(text, str(variant))  # still a valid rubric


def test_rollouts_to_reach_is_the_first_evaluated_point_at_the_target() -> None:
    curve = Curve(spec=RunSpec(method="grpo", model="tiny"),
                  points=[CurvePoint(0, 0.0, 0.0), CurvePoint(64, 0.1, 0.2), CurvePoint(128, 0.3, 0.4)])
    assert rollouts_to_reach(curve, 0.1) == 64
    assert rollouts_to_reach(curve, 0.25) == 128
    assert rollouts_to_reach(curve, 0.5) is None
    assert rollouts_to_reach(curve, 0.0) == 64  # the untrained point reaches nothing


def test_a_curves_band_is_each_points_interval_over_seeds_and_games_as_the_tables_print_it() -> None:
    rng = np.random.default_rng(3)
    wins = rng.random((3, 2, 5, 4)) < np.array([0.1, 0.6])[None, :, None, None]  # (seeds, points, games, episodes)
    runs = [Curve(spec=RunSpec(method="grpo", model="tiny"),
                  points=[CurvePoint(64 * i, float(wins[seed, i].mean()), 0.0, wins=tuple(map(tuple, wins[seed, i])))
                          for i in range(2)]) for seed in range(3)]
    band = curve_band(runs)
    assert band is not None
    for i in range(2):
        interval = success_interval(wins[:, i].astype(float))
        assert (band[0][i], band[1][i]) == (interval.low, interval.high)
    assert band[0][0] < band[1][0] < band[0][1]  # the two points' intervals here do not overlap
    bare = [Curve(spec=RunSpec(method="grpo", model="tiny"), points=[CurvePoint(0, 0.1, 0.0)])]
    assert curve_band(bare) is None  # no wins recorded: no interval to draw


def test_a_run_folder_is_resumed_by_its_own_settings_continued_from_a_shorter_run_or_emptied(
        tmp_path: Path) -> None:
    spec = RunSpec(method="trca", model="smollm2-135m-instruct", rubric=Path("textworld.rubric"), iterations=10,
                   action_mode="generate")
    key = dataclasses.asdict(spec)  # any settings: paths are saved as text
    out = tmp_path / "run"
    assert start_run_folder(out, key) is None and (out / "spec.json").is_file()  # fresh, marked as this run's
    (out / "metrics.jsonl").write_text("{}\n")  # killed before its first checkpoint: nothing to resume
    assert start_run_folder(out, key) is None and not (out / "metrics.jsonl").exists()
    (out / "checkpoints" / "iter_000003").mkdir(parents=True)  # killed after its third iteration
    assert start_run_folder(out, key) == out / "checkpoints" / "iter_000003"
    other = dataclasses.asdict(dataclasses.replace(spec, lr=5e-3))
    assert start_run_folder(out, other) is None and not (out / "checkpoints").exists()  # another run: afresh
    shorter = tmp_path / "shorter"
    (shorter / "checkpoints" / "iter_000002").mkdir(parents=True)
    (shorter / "points").mkdir()
    assert start_run_folder(out, key, continue_from=shorter) == out / "checkpoints" / "iter_000002"
    assert (out / "points").is_dir() and (shorter / "checkpoints" / "iter_000002").is_dir()  # copied, left as it was
    (out / "checkpoints" / "iter_000004").mkdir()  # trained on: its own run now, the shorter one not copied again
    assert start_run_folder(out, key, continue_from=shorter) == out / "checkpoints" / "iter_000004"


def _tiny_setup(family_games: Path, tmp_path: Path) -> Setup:
    """FAMILY's games and a one-layer small policy of their words: the smallest setup a learning curve trains on."""
    from tracec.trace_rl.experiments.demo_settings import shipped_examples
    from tracec.trace_rl.experiments.small_policy import build_small_policy, vocabulary_texts

    games = FAMILY.prepare(list(FAMILY.train_seeds), family_games)
    policy = build_small_policy(vocabulary_texts(FAMILY, [games[s] for s in FAMILY.train_seeds]), tmp_path / "policy",
                                hidden=32, layers=1)
    return Setup(family=FAMILY, games=family_games, small_policy=policy,
                 rubric=shipped_examples() / "textworld.rubric")


@pytest.mark.slow
def test_evaluating_a_few_games_at_a_time_plays_the_same_episodes(family_games: Path, tmp_path: Path) -> None:
    from tracec.trace_rl.experiments.learning_curve import EVAL_STREAM, SMALL_LORA, play
    from tracec.trace_rl.policy.model import Policy

    setup = _tiny_setup(family_games, tmp_path)
    policy = Policy.load(str(setup.small_policy), SMALL_LORA, seed=0)
    games = list(FAMILY.train_seeds)  # three games
    whole = RunSpec(method="grpo", model=str(setup.small_policy), eval_episodes=3)

    def commands(spec: RunSpec) -> list[tuple[str, list[str]]]:  # each episode's game and the commands it drew
        episodes = play(policy, setup, spec, games, episodes=3, stream=EVAL_STREAM)
        return [(e.trajectory["task"], [a["text"] for a in e.trajectory["actions"]]) for e in episodes]

    at_once = commands(whole)
    assert len(at_once) == 9 and len({tuple(c) for _, c in at_once}) > 3  # sampled: the episodes differ
    for batch in (1, 3, 5):  # a game at a time (below one game's episodes), one game, and one and a bit
        assert commands(dataclasses.replace(whole, eval_batch=batch)) == at_once


@pytest.mark.slow
def test_a_killed_learning_curve_resumes_from_its_checkpoint_and_reuses_its_points(
        family_games: Path, tmp_path: Path) -> None:
    import json
    import shutil

    from tracec.trace_rl.experiments.learning_curve import learning_curve

    setup = _tiny_setup(family_games, tmp_path)
    policy = setup.small_policy
    spec = RunSpec(method="trca", model=str(policy), rubric=setup.rubric, iterations=2, eval_every=1, group_size=2,
                   groups_per_batch=1, eval_episodes=2, lr=2e-3)
    whole = learning_curve(setup, spec, tmp_path / "whole")
    # Killed during its second iteration: the newest checkpoint and point are not there yet.
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "whole", killed)
    shutil.rmtree(killed / "checkpoints" / "iter_000002")
    (killed / "points" / "iter_000002.json").unlink()
    marked = json.loads((killed / "points" / "iter_000001.json").read_text()) | {"reward": -1.0}
    (killed / "points" / "iter_000001.json").write_text(json.dumps(marked))  # read back, never played again
    resumed = learning_curve(setup, spec, killed, resume=True)
    assert [p.rollouts for p in resumed.points] == [0, 2, 4]
    assert resumed.points[1].reward == -1.0
    assert resumed.points[2] == whole.points[2]  # the exact resume trains the same adapter
    assert len(resumed.train_metrics) == 2


@pytest.mark.slow
def test_a_resumed_experiment_run_counts_the_cpu_seconds_spent_before_its_checkpoint(
        family_games: Path, tmp_path: Path) -> None:
    import json
    import shutil

    from bench.learning import _one_run

    setup = _tiny_setup(family_games, tmp_path)
    policy = setup.small_policy
    spec = RunSpec(method="grpo", model=str(policy), iterations=2, eval_every=1, group_size=2, groups_per_batch=1,
                   eval_episodes=1, lr=2e-3)
    whole = _one_run("grpo-s0", "sparse GRPO", spec, setup, tmp_path / "whole")
    ledger = json.loads((tmp_path / "whole" / "runs" / "grpo-s0" / "cpu_seconds.json").read_text())
    assert sorted(ledger) == ["1", "2"] and 0 < ledger["1"] <= ledger["2"] <= whole["cpu_s"]
    # Killed during its second iteration, after a first that (say) took 1000 CPU seconds:
    run = tmp_path / "killed" / "runs" / "grpo-s0"
    shutil.copytree(tmp_path / "whole" / "runs" / "grpo-s0", run)
    shutil.rmtree(run / "checkpoints" / "iter_000002")
    (run / "points" / "iter_000002.json").unlink()
    (run / "cpu_seconds.json").write_text(json.dumps({"1": 1000.0, "2": 5000.0}))  # "2": work lost with the kill
    resumed = _one_run("grpo-s0", "sparse GRPO", spec, setup, tmp_path / "killed")
    assert 1000.0 < resumed["cpu_s"] < 1000.0 + whole["cpu_s"]  # the first iteration's, then only the second's
    assert 1000.0 < json.loads((run / "cpu_seconds.json").read_text())["2"] <= resumed["cpu_s"]  # redone, not 5000


@pytest.mark.slow
def test_a_longer_run_made_from_a_finished_shorter_one_is_the_run_made_from_the_start(
        family_games: Path, tmp_path: Path) -> None:
    import json

    import torch
    from safetensors.torch import load_file

    from bench.learning import _one_run, _shorter_run, _spec_key, prefix_curve
    from bench.preregistered import training_cpu_s

    setup = _tiny_setup(family_games, tmp_path)

    def spec(iterations: int, lr: float = 2e-3) -> RunSpec:
        return RunSpec(method="trca", model=str(setup.small_policy), rubric=setup.rubric, iterations=iterations,
                       eval_every=1, group_size=2, groups_per_batch=1, eval_episodes=2, lr=lr)

    fresh = _one_run("trca-s0", "GRPO + TRCA", spec(4), setup, tmp_path / "fresh")
    short = _one_run("trca-s0", "GRPO + TRCA", spec(2), setup, tmp_path / "short")
    longer = _one_run("trca-s0", "GRPO + TRCA", spec(4), setup, tmp_path / "long", tmp_path / "short")
    assert longer["points"] == fresh["points"] and longer["train"] == fresh["train"]
    assert longer["points"][:3] == short["points"]
    adapter = "runs/trca-s0/checkpoints/iter_000004/adapter/adapter_model.safetensors"
    ours, theirs = load_file(str(tmp_path / "long" / adapter)), load_file(str(tmp_path / "fresh" / adapter))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    ledger = json.loads((tmp_path / "long" / "runs" / "trca-s0" / "cpu_seconds.json").read_text())
    assert sorted(ledger, key=int) == ["1", "2", "3", "4"]  # the shorter run's CPU seconds, then its own
    assert not (tmp_path / "short" / "runs" / "trca-s0" / "checkpoints" / "iter_000003").exists()  # left as it was
    # only a shorter run of the same settings is continued
    short_run = tmp_path / "short" / "runs" / "trca-s0"
    assert _shorter_run(short_run, _spec_key(spec(4), setup.family)) == short_run
    assert _shorter_run(short_run, _spec_key(spec(4, lr=5e-3), setup.family)) is None
    assert _shorter_run(short_run, _spec_key(spec(2), setup.family)) is None
    # and the shorter run is read off the longer one's first half, which a later session finds in an archive
    half = prefix_curve(fresh, short["spec"])
    assert half is not None and half["spec"] == short["spec"]
    assert half["points"] == short["points"] and half["train"] == short["train"]
    assert training_cpu_s(half) == fresh["cpu_s_by_iteration"]["2"] and half["cpu_s"] is None
    assert half["constant_fraction"] == short["constant_fraction"]
    assert prefix_curve(fresh, _spec_key(spec(2, lr=5e-3), setup.family)) is None  # other settings
    assert prefix_curve(short, fresh["spec"]) is None  # a shorter run holds no longer one
