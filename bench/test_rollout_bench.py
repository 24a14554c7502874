"""Time per sampled token of multi-turn rollouts on a TextWorld game with SmolLM2, over 2, 4 and 8 turns: the trainer's
batched group decoding with each episode's KV cache kept across its turns, against re-encoding the whole conversation
every turn, and against the chat backend decoding one episode at a time.

One group of K episodes of one `tw-simple` game (seed 2; every member plays the same game, as GRPO samples a group),
up to TURNS agent turns of up to NEW_TOKENS tokens each, temperature 1. Sides:
- `kv cache kept`: `RolloutEngine` + `KVCacheSampler`: the group decodes as one batch; after a turn only the
  observation's tokens are prefilled.
- `batched re-encode`: the same engine and batch, but the cache is dropped after every turn, so each turn prefills
  the whole conversation again (what a sampler without a kept cache pays).
- `text backend, one at a time`: `run_episode` with a `ChatAgent` over `TransformersBackend` (`model.generate` on
  the rendered conversation), the text-level path a user of the chat backend has.

Every side plays the same episodes (replay). An untimed recording round samples the group once with the KV-cache
sampler at the most turns and keeps each episode's sampled ids, turn by turn. Every side then replays them, in every
round: it runs the model's forward at each decoding step and its own draw from the distribution exactly as when
sampling, but keeps the recorded token (the engine sides: `_draw` of a replaying subclass of the sampler; the text
backend: a logits processor, given to `model.generate`, that leaves only the recorded token). Before timing, and
again on every timed round's output, each side's sampled ids (the text backend's generated ids) are checked equal to
the recording for every episode and turn, and its games (each observation's text, each action and game state) equal
to the recording's: the sides did the same work, so their times per group compare, and the time per sampled token
is the same quotient for all of them. The game is loaded once per episode on every side.

Each turns setting is a set of sides; all of them interleave in every round (`bench/sides.py`), the first run of
each (the check) warming it. The table gives per setting the mean context an episode's last turn is sampled from
(what re-encoding prefills on that turn), so the growth of re-encoding's cost with context shows.

Sizes come from the environment, defaults in brackets (a smoke run: `ROLLOUT_BENCH_K=2 ROLLOUT_BENCH_TOKENS=4
ROLLOUT_BENCH_TURNS=2 ROLLOUT_BENCH_TEXT_TURNS=2 ROLLOUT_BENCH_ROUNDS=1`; it writes bench/RESULTS.md too):
- ROLLOUT_BENCH_K (2): episodes a group.
- ROLLOUT_BENCH_TOKENS (8): the most tokens a turn.
- ROLLOUT_BENCH_TURNS (2,4,8): the turns settings, comma-separated.
- ROLLOUT_BENCH_TEXT_TURNS (4): the settings the text backend runs at too (comma-separated, `all`, or empty for
  none); it is the slowest side, so by default only the middle one.
- ROLLOUT_BENCH_ROUNDS (5, `sides.ROUNDS`): timed rounds.
The defaults keep the whole run (recording, check, 5 rounds) near 15 minutes on a quiet 2-core machine: the first
prompt is ~770 tokens and each observation ~185 (the admissible commands are listed), so prefilling dominates, and
re-encoding 8 turns alone prefills ~11,600 tokens an episode; a group's cost is linear in K, and NEW_TOKENS moves it
little.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from tracec.trace_rl.envs.agent import ChatAgent, run_episode
from tracec.trace_rl.envs.protocol import Observation, StepResult
from tracec.trace_rl.envs.textworld.env import SimpleGame, TextWorldEnvironment, make_game
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.sampler import SampledTurn, TurnRequest
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate
from transformers import LogitsProcessor, LogitsProcessorList

from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, Spread, describe, from_env, interleaved, load_average

K = from_env("ROLLOUT_BENCH_K", (2,))[0]
NEW_TOKENS = from_env("ROLLOUT_BENCH_TOKENS", (8,))[0]
TURNS = from_env("ROLLOUT_BENCH_TURNS", (2, 4, 8))
_TEXT_SETTING = os.environ.get("ROLLOUT_BENCH_TEXT_TURNS")  # `all`, blank (none) or turns
TEXT_TURNS = (TURNS if _TEXT_SETTING == "all" else () if _TEXT_SETTING is not None and not _TEXT_SETTING.strip()
              else from_env("ROLLOUT_BENCH_TEXT_TURNS", (4,)))
BENCH_ROUNDS = from_env("ROLLOUT_BENCH_ROUNDS", (ROUNDS,))[0]
KV, REENCODE, TEXT = "kv cache kept", "batched re-encode", "text backend, one at a time"
COMMAND = "pytest bench/test_rollout_bench.py --benchmark-only -p no:xdist"


class Script:
    """The recorded episodes: member -> its turns -> each turn's (token id, sampler log-prob), handed out in order.
    `begin` opens the next turn of each listed episode, `next` gives that turn's next token."""

    def __init__(self, turns: Mapping[int, Sequence[Sequence[tuple[int, float]]]]) -> None:
        self.turns = turns
        self.rewind()

    def rewind(self) -> None:
        """Every episode back at its first turn (a new run begins)."""
        self._played = dict.fromkeys(self.turns, 0)
        self._open: dict[int, Sequence[tuple[int, float]]] = {}
        self._step: dict[int, int] = {}

    def begin(self, keys: Sequence[int]) -> None:
        for key in keys:
            if self._played[key] >= len(self.turns[key]):
                raise AssertionError(f"episode {key} asks for turn {self._played[key] + 1}; the recording has "
                                     f"{len(self.turns[key])}")
            self._open[key], self._step[key] = self.turns[key][self._played[key]], 0
            self._played[key] += 1

    def next(self, key: int) -> tuple[int, float]:
        step = self._step[key]
        if step >= len(self._open[key]):
            raise AssertionError(f"episode {key} decodes past its recorded turn of {len(self._open[key])} tokens")
        self._step[key] = step + 1
        return self._open[key][step]


class ReplayKVCacheSampler(KVCacheSampler):
    """The KV-cache sampler, keeping the recorded token at each step: the forward and the draw are the sampler's own
    (the drawn token is discarded), so a replayed turn costs what a sampled one does."""

    script: Script

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        self.script.begin([request.key for request in requests])
        return super().sample(requests)

    def _draw(self, logits: torch.Tensor, rows: list[int],
              requests: Sequence[TurnRequest]) -> dict[int, tuple[int, float]]:
        super()._draw(logits, rows, requests)
        return {row: self.script.next(requests[row].key) for row in rows}


class ReencodeSampler(KVCacheSampler):
    """The KV-cache sampler with its cache dropped after every turn: each turn prefills the whole context."""

    def sample(self, requests: Sequence[TurnRequest]) -> list[SampledTurn]:
        self.reset()
        return super().sample([TurnRequest(key=r.key, new_ids=r.context, context=r.context, generator=r.generator,
                                           max_new_tokens=r.max_new_tokens) for r in requests])

    def release(self, keys: Sequence[int]) -> None:
        """Nothing is kept between turns."""


class ReplayReencodeSampler(ReplayKVCacheSampler, ReencodeSampler):
    """Re-encoding every turn, keeping the recorded tokens."""


class Forced(LogitsProcessor):
    """Leaves only the recorded token of episode `key`'s open turn; `generate` then samples it (with certainty) by
    its usual softmax and draw."""

    def __init__(self, script: Script, key: int) -> None:
        self.script, self.key = script, key

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        token, _ = self.script.next(self.key)
        forced = torch.full_like(scores, -math.inf)
        forced[:, token] = 0.0
        return forced  # type: ignore[return-value]


class ReplayedGenerate:
    """The model, its `generate` keeping the recorded tokens of episode `member`; what it generated is kept."""

    def __init__(self, model: Any, script: Script) -> None:
        self._model, self.script, self.member = model, script, 0
        self.generated: dict[int, list[list[int]]] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "_model":
            raise AttributeError(name)
        return getattr(self._model, name)

    def generate(self, **kwargs: Any) -> torch.Tensor:
        self.script.begin([self.member])
        output: torch.Tensor = self._model.generate(**kwargs,
                                                    logits_processor=LogitsProcessorList([Forced(self.script,
                                                                                                 self.member)]))
        self.generated[self.member].append(output[0, kwargs["input_ids"].shape[1]:].tolist())
        return output


class SeenGame(TextWorldEnvironment):
    """The TextWorld environment, keeping the text of every observation it gives."""

    def __init__(self, game: Path) -> None:
        super().__init__(game)
        self.observations: list[str] = []

    def reset(self, seed: int) -> Observation:
        observation = super().reset(seed)
        self.observations = [observation.text]
        return observation

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        self.observations.append(result.observation.text)
        return result


@dataclass(frozen=True)
class Played:
    """What one episode did: its sampled ids turn by turn, and its game (observations, actions, states)."""

    turns: tuple[tuple[int, ...], ...]
    observations: tuple[str, ...]
    actions: tuple[Any, ...]
    states: tuple[Any, ...]
    last_context: int = 0  # the tokens its last turn was sampled from (not compared: the text backend re-renders)

    def prefix(self, turns: int) -> Played:
        """The episode's first `turns` turns."""
        return Played(self.turns[:turns], self.observations[:turns + 1], self.actions[:turns], self.states[:turns + 1])


def sampled_turns(episode: EpisodeRollout) -> list[list[tuple[int, float]]]:
    """Each turn's (id, sampler log-prob): the runs of sampled tokens (an observation always lies between two)."""
    turns: list[list[tuple[int, float]]] = []
    previous = False
    for token, logprob, sampled in zip(episode.token_ids, episode.sampler_logprobs, episode.sampled, strict=True):
        if sampled and not previous:
            turns.append([])
        if sampled:
            turns[-1].append((int(token), float(logprob)))
        previous = bool(sampled)
    return turns


def played_episode(episode: EpisodeRollout, game: SeenGame) -> Played:
    turns = [tuple(token for token, _ in turn) for turn in sampled_turns(episode)]
    trajectory = episode.trajectory
    return Played(tuple(turns), tuple(game.observations), tuple(trajectory["actions"]), tuple(trajectory["states"]),
                  last_context=len(episode.token_ids) - len(turns[-1]))


def check(name: str, got: Mapping[int, Played], want: Mapping[int, Played]) -> None:
    """The side played the recorded episodes: the same sampled ids every turn, the same games."""
    assert set(got) == set(want), f"{name}: episodes {sorted(got)}, recorded {sorted(want)}"
    for member, expected in want.items():
        for field in ("turns", "observations", "actions", "states"):
            assert getattr(got[member], field) == getattr(expected, field), \
                f"{name} turns: episode {member}: its {field} differ from the recording"


@pytest.mark.slow
def test_rollouts_kv_cache_kept_vs_reencode(benchmark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert set(TEXT_TURNS) <= set(TURNS), f"ROLLOUT_BENCH_TEXT_TURNS={TEXT_TURNS} not among the turns {TURNS}"
    game = make_game(SimpleGame(seed=2), tmp_path_factory.mktemp("tw-rollouts"))
    policy = Policy.load("smollm2-135m-instruct", LoraSection(), seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's two cores are shared: one thread each side, no waiting between threads
    try:
        with torch.no_grad():
            rounds, wall, load, context, tokens = _measure(game, policy, benchmark)
    finally:
        torch.set_num_threads(threads)
    rows = []
    for turns in TURNS:
        sides = [KV, REENCODE] + ([TEXT] if turns in TEXT_TURNS else [])
        setting = Rounds({side: rounds.seconds[_name(side, turns)] for side in sides})
        for side in sides:
            seconds = setting.seconds[side]
            per_token = setting.time(side).scaled(1000 / tokens[turns])
            rate = Spread.of([tokens[turns] / s for s in seconds])
            rows.append([turns, f"{context[turns]:.0f}", tokens[turns], side, setting.time(side).cell(1),
                         per_token.cell(0), rate.cell(1), setting.ratio(side, KV).cell(2, "x")])
    text_at = ("The text backend runs at every setting." if set(TEXT_TURNS) == set(TURNS) else
               f"The text backend runs at {', '.join(map(str, TEXT_TURNS))} turns only (the slowest side)."
               if TEXT_TURNS else "The text backend is left out.")
    body = (f"One group of K = {K} episodes of a tw-simple game (seed 2), up to {', '.join(map(str, TURNS))} turns of "
            f"up to {NEW_TOKENS} tokens each, SmolLM2-135M-Instruct + LoRA r16 (fp32, CPU), temperature 1. Every side "
            "replays the same recorded episodes: the same sampled tokens every turn (checked, before and after "
            "timing, so the same games), the model's forward and the side's own draw run at every step as when "
            f"sampling. {describe(len(rounds), 'in-process', 'one torch thread, every side')} Model loading, the "
            "recording round and each side's first run (the check, which warms it) are untimed. Context at last "
            "turn: the mean tokens an episode's last turn is sampled from (what re-encoding prefills then); tokens "
            "a group: the group's sampled tokens, the same for every side of a setting (ms per token = s per group "
            f"/ tokens). {text_at} Load average "
            f"{load[0]} before, {load[1]} after; {wall:.0f} s of timed rounds.\n\n"
            + markdown_table(["turns", "context at last turn", "tokens a group", "side", "s per group",
                              "ms per token", "tokens/s", "time vs kv cache kept"], rows))
    record("rollouts", body, COMMAND)


def _name(side: str, turns: int) -> str:
    return f"{side} @ {turns}"


def _measure(game: Path, policy: Policy, benchmark: Any) -> tuple[Rounds, float, tuple[str, str], dict[int, float],
                                                                  dict[int, int]]:
    """Record the episodes, check every side replays them, time the interleaved rounds, check those again. The
    rounds, their seconds in all, the load average before and after, and per turns setting the mean context of the
    last turn and the sampled tokens of the group."""
    template = TurnTemplate(policy.tokenizer)
    settings = RolloutSection(max_new_tokens=NEW_TOKENS, max_context_tokens=8192)
    options: dict[str, Any] = {"temperature": 1.0, "end_of_turn_ids": template.end_of_turn_ids,
                               "pad_id": int(policy.tokenizer.pad_token_id)}
    group = [GroupTask(group=0, seed=0)]
    games: list[SeenGame] = []

    def make_env() -> SeenGame:  # the engine starts its episodes in member order
        games.append(SeenGame(game))
        return games[-1]

    recorder = RolloutEngine(KVCacheSampler(policy.model, **options), template, make_env, settings,
                             max_turns=max(TURNS))
    recording = recorder.run(group, group_size=K, seed=0, iteration=0)  # untimed; warms the game and the kernels
    script = Script({e.member: sampled_turns(e) for e in recording})
    full = {e.member: played_episode(e, games[e.member]) for e in recording}
    want = {turns: {member: episode.prefix(turns) for member, episode in full.items()} for turns in TURNS}

    kv_sampler = ReplayKVCacheSampler(policy.model, **options)
    reencode_sampler = ReplayReencodeSampler(policy.model, **options)
    kv_sampler.script = reencode_sampler.script = script
    replayed = ReplayedGenerate(policy.model, script)
    backend = TransformersBackend(replayed, policy.tokenizer,
                                  config=SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=1.0))

    def engine_side(sampler: KVCacheSampler, turns: int) -> Callable[[], dict[int, Played]]:
        engine = RolloutEngine(sampler, template, make_env, settings, max_turns=turns)

        def run() -> dict[int, Played]:
            script.rewind()
            games.clear()
            episodes = engine.run(group, group_size=K, seed=0, iteration=0)
            return {e.member: played_episode(e, games[e.member]) for e in episodes}
        return run

    def text_side(turns: int) -> Callable[[], dict[int, Played]]:
        def run() -> dict[int, Played]:
            script.rewind()
            replayed.generated = {member: [] for member in range(K)}
            out = {}
            for member in range(K):
                replayed.member = member
                with SeenGame(game) as env:
                    trajectory = run_episode(env, ChatAgent(backend), 0, turns, episode=f"g0.{member}")
                out[member] = Played(tuple(map(tuple, replayed.generated[member])), tuple(env.observations),
                                     tuple(trajectory["actions"]), tuple(trajectory["states"]))
            return out
        return run

    runs: dict[str, tuple[int, Callable[[], dict[int, Played]]]] = {}
    for turns in TURNS:
        runs[_name(KV, turns)] = turns, engine_side(kv_sampler, turns)
        runs[_name(REENCODE, turns)] = turns, engine_side(reencode_sampler, turns)
        if turns in TEXT_TURNS:
            runs[_name(TEXT, turns)] = turns, text_side(turns)
    context: dict[int, float] = {}
    for name, (turns, run) in runs.items():  # the check, before any timing; it warms each side
        got = run()
        check(name, got, want[turns])
        if name == _name(KV, turns):
            context[turns] = sum(episode.last_context for episode in got.values()) / len(got)
    tokens = {turns: sum(len(turn) for episode in want[turns].values() for turn in episode.turns) for turns in TURNS}
    outputs: dict[str, list[dict[int, Played]]] = {name: [] for name in runs}

    def timed(name: str, run: Callable[[], dict[int, Played]]) -> Callable[[], None]:
        return lambda: outputs[name].append(run())

    before = load_average()
    started = time.perf_counter()
    rounds = interleaved(benchmark, {name: (timed(name, run), 1) for name, (_, run) in runs.items()}, BENCH_ROUNDS,
                         warm=False)
    wall = time.perf_counter() - started
    after = load_average()
    for name, results in outputs.items():  # every timed round replayed the recording too
        for result in results:
            check(name, result, want[runs[name][0]])
    return rounds, wall, (before, after), context, tokens
