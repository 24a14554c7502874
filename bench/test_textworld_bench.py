"""Steps per second of a TextWorld game played through `TextWorldEnvironment` (the one environment protocol:
canonical facts and the agent's observation text per step) against TextWorld alone, with the same commands and
the same requested infos; target: at least 0.7x.

One `tw-simple` game is made (about 10 s), a seeded random agent picks the command list once, then both sides
replay it from a reset of their own environment, in interleaved rounds (bench/sides.py: which side goes first
alternates), so that machine noise hits both alike. Reset and game loading are outside the timings. The fact
extraction alone is also timed on the recorded TextWorld states.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import textworld
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.textworld.agents import RandomAgent
from tracec.trace_rl.envs.textworld.env import REQUESTED_INFOS, SimpleGame, TextWorldEnvironment, make_game
from tracec.trace_rl.envs.textworld.facts import action_facts, state_facts

from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, describe, load_average

STEPS = 60


def _start_textworld(game: Path) -> textworld.core.Environment:
    infos = textworld.EnvInfos(**dict.fromkeys(REQUESTED_INFOS, True))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
        return textworld.start(str(game), request_infos=infos)


def _textworld_alone(env: textworld.core.Environment, commands: list[str]) -> float:
    """Seconds to play `commands` after a reset (untimed)."""
    env.reset()
    start = time.perf_counter()
    for command in commands:
        env.step(command)
    return time.perf_counter() - start


def _with_facts(env: TextWorldEnvironment, commands: list[str]) -> float:
    """Seconds to play `commands` after a reset (untimed)."""
    env.reset(0)
    start = time.perf_counter()
    for command in commands:
        env.step(command)
    return time.perf_counter() - start


def _facts_only_us(env: TextWorldEnvironment, commands: list[str]) -> float:
    """Microseconds a step of fact extraction alone, on the game states of one replay."""
    env.reset(0)
    states = [env.game_state]
    for command in commands:
        env.step(command)
        states.append(env.game_state)
    start = time.perf_counter()
    for before, after, command in zip(states, states[1:], commands, strict=False):
        state_facts(after)
        action_facts(
            text=command,
            command=command,
            admissible_before=before["admissible_commands"],
            score_before=before["score"],
            score_after=after["score"],
        )
    return (time.perf_counter() - start) / len(commands) * 1e6


@pytest.mark.slow
def test_textworld_steps_per_second(benchmark, tmp_path_factory: pytest.TempPathFactory) -> None:
    game = make_game(SimpleGame(seed=2), tmp_path_factory.mktemp("tw-bench"))
    raw = _start_textworld(game)
    with TextWorldEnvironment(game) as env:
        episode = run_episode(env, RandomAgent(env, seed=0), 0, STEPS, episode="bench")
        commands = [action["text"] for action in episode["actions"]]
        seconds: dict[str, list[float]] = {"alone": [], "ours": []}
        for round_ in range(ROUNDS):  # alternate which side goes first
            if round_ % 2:
                seconds["ours"].append(_with_facts(env, commands))
            seconds["alone"].append(_textworld_alone(raw, commands))
            if not round_ % 2:
                seconds["ours"].append(_with_facts(env, commands))
        facts_us = _facts_only_us(env, commands)
        benchmark.pedantic(_with_facts, args=(env, commands), rounds=3, iterations=1)
    raw.close()

    rounds, per_step = Rounds(seconds), 1e3 / len(commands)
    speed = rounds.ratio("alone", "ours")  # time alone / time with facts = our speed / TextWorld's
    table = markdown_table(
        ["side", "ms/step"],
        [
            ["textworld alone", rounds.time("alone").scaled(per_step).cell()],
            ["textworld + tracec facts", rounds.time("ours").scaled(per_step).cell()],
            ["speed, with facts / alone (target >= 0.7x)",
             speed.cell(2, "x") + (" met" if speed.median >= 0.7 else " missed")],
            ["fact extraction alone", f"{facts_us / 1000:.3f}"],
        ],
    )
    body = (
        f"{len(commands)} seeded random admissible commands on one tw-simple game, infos: "
        f"{', '.join(REQUESTED_INFOS)}.\n\n{table}\n\n"
        + describe(len(rounds), "in-process", "1 (TextWorld's engine and ours are single-threaded)")
        + f" Load average (1 min): {load_average()}."
    )
    record("textworld", body, "python -m pytest bench/test_textworld_bench.py --benchmark-only -p no:xdist")
    print(body)
