"""`tracec demo`: the main job, end to end on what ships with the project, offline.

1. check every example `.rubric` file;  2. explain the household rubric;  3. make a TextWorld game, play it with the
walkthrough agent, seeded random agents and an LLM agent (a tiny model built locally with random weights, through the
CPU rollout backend), one task group, and score the trajectories with the compiled TextWorld rubric;  4. validate a capability environment;  5. replay a tau2-bench task's gold actions and score the episode with
the tau2 rubric, when the tau2 data is found. Every artefact lands in `workdir`.
The examples are package data (`tracec.examples`), found through `importlib.resources`, so the demo runs from any
working folder and from an installed wheel. Left out: training (the GRPO trainer runs on top of these scores), and
installs that are zipped rather than unpacked on disk.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import numpy as np
from tracec.compiler.explain import explain
from tracec.dsl.check import check
from tracec.dsl.parse import parse_file
from tracec.runtime.agent import Agent, ChatAgent, run_episode
from tracec.runtime.evaluate import Evaluation, RubricScorer, load_rubric
from tracec.runtime.output import write_records

RANDOM_AGENTS = 3
GAME_SEED = 7
MAX_STEPS = 40
LLM_STEPS = 8  # the tiny model's random text is mostly invalid; a few steps show that the rubric says so


def shipped_examples() -> Path:
    """The folder of the examples installed with the package (`examples/` of the checkout, in an editable install)."""
    root = resources.files("tracec.examples")
    if not isinstance(root, Path):
        raise TypeError(f"the examples are not files on disk ({root!r}); install tracec unzipped")
    return root


def run_demo(workdir: Path, examples: Path | None = None) -> int:
    examples = shipped_examples() if examples is None else examples
    workdir.mkdir(parents=True, exist_ok=True)
    _section("1. check the shipped examples")
    for path in sorted(examples.rglob("*.rubric")):
        checked = check(parse_file(str(path)))
        print(f"  {path.relative_to(examples)}: {len(checked.rubrics)} rubrics, {len(checked.capabilities)} "
              f"capabilities, {len(checked.environments)} environments")

    _section("2. explain household.rubric (first lines)")
    household = examples / "household.rubric"
    listing = explain(load_rubric(household.read_text(encoding="utf-8"), str(household))).splitlines()
    print("\n".join("  " + line for line in listing[:20]))

    _section("3. TextWorld: a generated game; walkthrough, random and tiny-LLM agents; scored by textworld.rubric")
    trajectories = _play_textworld(workdir)
    scorer = RubricScorer.from_file(examples / "textworld.rubric")
    result = scorer.evaluate(trajectories)
    write_records(result.records(), workdir / "textworld_eval.jsonl")
    _summarize(result, {op.name: op.category for op in scorer.compiled.operators})

    _section("4. a capability environment: validation over 20 seeds")
    from tracec.runtime.env import load_environment
    from tracec.runtime.env.validate import validate

    report = validate(load_environment(str(examples / "envs" / "structured_data_reasoning.rubric")), seeds=20)
    print("\n".join("  " + line for line in report.render().splitlines()))

    _section("5. tau2-bench: gold episode of a retail task, scored by tau2.rubric")
    _tau2(workdir, examples)
    print(f"\nartefacts in {workdir}/")
    return 0 if report.ok else 1


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _play_textworld(workdir: Path) -> Path:
    from tracec.trace_rl.envs.textworld_agents import RandomAgent, WalkthroughAgent
    from tracec.trace_rl.envs.textworld_env import SimpleGame, TextWorldEnvironment

    # The family of tw-simple games; its seed 7 is the one played (made by tw-make on first use, then cached).
    with TextWorldEnvironment(SimpleGame(), cache_dir=workdir / "games") as env:
        agents: list[tuple[str, Agent, int]] = [("walkthrough", WalkthroughAgent(env), MAX_STEPS)]
        agents += [(f"random{i}", RandomAgent(env, seed=i), MAX_STEPS) for i in range(RANDOM_AGENTS)]
        agents.append(("tiny-llm", _tiny_llm_agent(), LLM_STEPS))
        episodes = [run_episode(env, agent, GAME_SEED, turns, episode=name) for name, agent, turns in agents]
        game = env.game_file(GAME_SEED)
    path = workdir / "textworld_trajectories.jsonl"
    write_records(episodes, path)
    print(f"  game {game}; {len(episodes)} episodes -> {path}")
    return path


def _tiny_llm_agent() -> Agent:
    import torch
    from tracec.trace_rl.rollout import SamplingConfig, TransformersBackend
    from tracec.trace_rl.tiny_model import build_tiny_model

    torch.set_num_threads(1)  # a 100k-parameter model runs far slower when two threads contend for 2 cores
    model, tokenizer = build_tiny_model(seed=0)
    backend = TransformersBackend(model, tokenizer, config=SamplingConfig(max_new_tokens=24, seed=0))
    return ChatAgent(backend, history_turns=8)


def _summarize(result: Evaluation, categories: dict[str, str]) -> None:
    names = result.operator_names
    offsets = result.batch.episode_offsets
    returns = result.episode_returns()
    print(f"  {'episode':<12} {'steps':>5} {'env':>5} {'TRCA':>7} {'A mean':>7}  operators that fired")
    for e, episode in enumerate(result.batch.episodes):
        rows = result.fired[offsets[e] : offsets[e + 1]]
        fired = [f"{n}({categories[n][0]})" for n, count in zip(names, rows.sum(axis=0)) if count]
        a_mean = float(np.mean(result.rewards.A[offsets[e] : offsets[e + 1]])) if len(rows) else 0.0
        print(f"  {episode:<12} {len(rows):>5} {result.batch.env_reward[e]:>5.2f} {returns[e]:>7.3f} {a_mean:>7.3f}  "
              + " ".join(fired))


def _tau2(workdir: Path, examples: Path) -> None:
    from tracec.trace_rl.envs.tau2.env import find_data_dir, load_domain
    from tracec.trace_rl.envs.tau2.environment import Tau2Environment
    from tracec.trace_rl.envs.tau2.gold import GoldAgent, gold_user

    try:
        data_dir = find_data_dir()
    except FileNotFoundError as error:
        print(f"  skipped: {error}")
        return
    env = Tau2Environment(load_domain("retail", data_dir), user=gold_user(), task_ids=["0"])
    record = run_episode(env, GoldAgent(env), 0, env.max_steps, episode="gold-retail-0")
    path = workdir / "tau2_trajectories.jsonl"
    write_records([record], path)
    result = RubricScorer.from_file(examples / "tau2.rubric").evaluate(path)
    fired = [n for n, c in zip(result.operator_names, result.fired.sum(axis=0)) if c]
    print(f"  retail task 0: benchmark reward {record['env_reward']:.1f}, {len(record['actions'])} turns, "
          f"TRCA return {result.episode_returns()[0]:.3f}; fired: {' '.join(fired)}", file=sys.stdout)
