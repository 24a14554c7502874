"""Learning curves on the TextWorld task family: one policy trained with one method, evaluated on held-out seeds.

    setup = prepare_setup(workdir)                              # the games made, the small policy built (cached)
    spec = RunSpec(method="trca", model=str(setup.small_policy), rubric=setup.rubric, iterations=30, eval_every=5)
    curve = learning_curve(setup, spec, workdir / "trca-seed0")  # trains, then evaluates every checkpoint
    plot_curves({"GRPO": [grpo], "GRPO + TRCA": [trca]}, workdir / "learning.png")

A run trains through the one trainer (`tracec.trace_rl.grpo.train.train`) with a checkpoint every `eval_every`
iterations, all kept; each checkpoint's adapter (and the untrained policy) is then evaluated on the family's
held-out seeds: `eval_episodes` episodes a seed, sampled as in training (temperature 1) from a fixed stream
(seed `EVAL_STREAM`), so every method and every checkpoint meets the same games and the same random numbers. The
x axis is rollouts: training episodes sampled so far (iterations x groups x group size; no resampling, so both
methods spend exactly the same). Evaluation episodes are not counted. What a point reports: the held-out success
rate and the mean share of the game's points reached (the "reward"; 1 for a win).

TRCA's ablations are rubric variants written beside the run: `lam` overrides lambda, `step_scale="none"` keeps A_S
centred on its step group's mean without dividing by its std, and `context_grouping=False`
replaces the rubric's `context` line by `context true`, one value for every step, so each
task group is one step group (anchor-free grouping switched off, A_S still on). Left out: early stopping and any
choice made by looking at the held-out curve (the settings are fixed before the run).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from safetensors.torch import load_file
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment, TaskFamily
from tracec.trace_rl.experiments.demo_settings import shipped_examples
from tracec.trace_rl.experiments.learning_stats import success_interval
from tracec.trace_rl.experiments.small_policy import build_small_policy, vocabulary_texts
from tracec.trace_rl.grpo.config import RUBRIC_CREDITS, TrainConfig, config_from_dict
from tracec.trace_rl.grpo.run_folder import latest_checkpoint
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

from tracec.atomic import write_atomic

EVAL_STREAM = 20_250_601  # the evaluation episodes' random stream, fixed with the held-out seeds
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SMALL_LORA = LoraSection(rank=16, alpha=32.0, targets=ALL_LINEAR)  # the small policy: every linear layer adapted
FAMILY_FACTORY = "tracec.trace_rl.envs.textworld.family:FamilyEnvironment"
METHODS = ("grpo", "trca", "gigpo", "shaped", "oracle")  # the trainer's credits (`advantage.kind`)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One training run and how it is evaluated."""

    method: str  # grpo: sparse GRPO | trca: GRPO + TRCA step advantages from `rubric` | gigpo: GiGPO's anchor-state
    #   step advantages | shaped: GRPO on `rubric`'s episode return | oracle: the plan's credit (`advantage.kind`)
    model: str  # a checkpoint folder or an installed model's name
    rubric: Path | None = None
    lora: LoraSection = SMALL_LORA
    iterations: int = 30
    eval_every: int = 5
    group_size: int = 8
    groups_per_batch: int = 8
    lr: float = 1e-2
    dual_clip: float = 0.0  # the loss's dual clip (0: off)
    clip_eps: float = 0.2
    loss_level: str = "auto"  # command in the admissible mode (log pi(c|s)), token otherwise
    entropy_coef: float = 0.0
    target_kl: float = 0.0
    epochs: int = 1
    mini_batches: int = 2
    seed: int = 0
    oracle: str = "signed"  # the oracle's credit: signed (+1 / -1) | imitation (1 / pi_old on the plan)
    lam: float | None = None
    step_scale: str | None = None  # overrides the rubric's: none is the "A_S mean-only" ablation
    context_grouping: bool = True
    action_mode: str = "admissible"
    choice_score: str = "mean"
    max_new_tokens: int = 16
    max_context_tokens: int = 2048
    eval_episodes: int = 2  # a held-out seed, sampled
    eval_greedy: bool = False  # also one greedy episode a held-out seed
    eval_batch: int = 0  # most episodes evaluated at once (0: all): a large model's caches must fit in memory
    threads: int = 1  # torch threads (0: torch's default)
    device: str = "cpu"
    backend: str = "transformers"  # the training rollouts' sampler (rollout.backend); evaluation uses the KV-cache one

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"RunSpec: method={self.method!r} must be one of {', '.join(METHODS)}")
        if self.method in RUBRIC_CREDITS and self.rubric is None:
            raise ValueError(f"RunSpec: {self.method} needs a rubric")
        if self.iterations < 1 or self.eval_every < 1 or self.eval_episodes < 1 or self.eval_batch < 0:
            raise ValueError("RunSpec: iterations, eval_every and eval_episodes must be >= 1, eval_batch >= 0")

    @property
    def rollouts_per_iteration(self) -> int:
        return self.group_size * self.groups_per_batch


@dataclass(frozen=True)
class CurvePoint:
    rollouts: int  # training episodes sampled before this evaluation
    success: float  # held-out success rate (sampled)
    reward: float  # held-out mean share of the game's points (1 for a win)
    wins: tuple[tuple[float, ...], ...] = ()  # (games, episodes): each sampled episode's win, games in seed order
    greedy: float | None = None  # held-out success of one greedy episode a game (eval_greedy)
    greedy_wins: tuple[float, ...] = ()


@dataclass
class Curve:
    spec: RunSpec
    points: list[CurvePoint] = field(default_factory=list)
    train_metrics: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def constant_fraction(self) -> float:
        """The share of training groups whose advantages were all zero (they taught nothing)."""
        values = [m["constant_fraction"] for m in self.train_metrics if "constant_fraction" in m]
        return float(np.mean(values)) if values else math.nan


@dataclass(frozen=True)
class Setup:
    family: TaskFamily
    games: Path  # the game cache
    small_policy: Path  # the small policy's checkpoint folder
    rubric: Path  # examples/textworld.rubric


def prepare_setup(workdir: Path, family: TaskFamily | None = None, *, rubric: Path | None = None,
                  hidden: int = 64, layers: int = 2) -> Setup:
    """The family's games made (cached in `workdir/games`) and the small policy built from the training games'
    vocabulary (cached in `workdir/small-policy-H-L`)."""
    family = family or TaskFamily()
    games = workdir / "games"
    files = family.prepare(list(family.train_seeds) + list(family.eval_seeds), games)
    # its vocabulary is the training games' text, which the objective's form changes
    folder = workdir / f"small-policy-{hidden}-{layers}" if family.objective == "steps" else \
        workdir / f"small-policy-{hidden}-{layers}-{family.objective}"
    if not (folder / "config.json").is_file():
        texts = vocabulary_texts(family, [files[seed] for seed in family.train_seeds])  # never held-out games
        build_small_policy(texts, folder, hidden=hidden, layers=layers)
    return Setup(family=family, games=games, small_policy=folder,
                 rubric=rubric or shipped_examples() / "textworld.rubric")


def run_config(spec: RunSpec, setup: Setup, out: Path) -> TrainConfig:
    """The trainer's config of `spec` on the family's training seeds (a contiguous range, as the trainer draws)."""
    seeds = setup.family.train_seeds
    if list(seeds) != list(range(seeds[0], seeds[0] + len(seeds))):
        raise ValueError("the family's training seeds must be one contiguous range for the trainer's task stream")
    advantage: dict[str, Any] = {"kind": spec.method, "filter_constant_groups": True, "max_resample_batches": 0}
    if spec.method in RUBRIC_CREDITS:
        advantage["rubric"] = str(rubric_variant(spec.rubric or setup.rubric, out,
                                                 context_grouping=spec.context_grouping))
        if spec.lam is not None:
            advantage["lam"] = spec.lam
        if spec.step_scale is not None:
            advantage["step_scale"] = spec.step_scale
    if spec.method == "oracle":
        advantage["oracle"] = spec.oracle
    return config_from_dict({
        "model": {"name": spec.model, "threads": spec.threads, "device": spec.device},
        "lora": {"rank": spec.lora.rank, "alpha": spec.lora.alpha, "dropout": spec.lora.dropout,
                 "targets": list(spec.lora.targets)},
        "env": {"kind": "python", "python": {"factory": FAMILY_FACTORY}, "first_seed": seeds[0],
                "num_seeds": len(seeds), "max_turns": setup.family.max_turns},
        "rollout": {"backend": spec.backend, "group_size": spec.group_size, "groups_per_batch": spec.groups_per_batch,
                    "max_new_tokens": spec.max_new_tokens, "max_context_tokens": spec.max_context_tokens,
                    "action_mode": spec.action_mode, "choice_score": spec.choice_score},
        "advantage": advantage,
        "optim": {"lr": spec.lr, "epochs": spec.epochs, "mini_batches": spec.mini_batches},
        "loss": {"dual_clip": spec.dual_clip, "clip_eps": spec.clip_eps, "level": spec.loss_level,
                 "entropy_coef": spec.entropy_coef, "target_kl": spec.target_kl},
        "run": {"iterations": spec.iterations, "checkpoint_every": spec.eval_every,
                "keep_checkpoints": spec.iterations // spec.eval_every + 1, "seed": spec.seed, "out": str(out)},
    })


def rubric_variant(rubric: Path, folder: Path, *, context_grouping: bool) -> Path:
    """`rubric` itself, or (no context grouping) a copy in `folder` whose step groups are whole task groups."""
    if context_grouping:
        return rubric
    text, count = re.subn(r"(?m)^(\s*)context\s+.*$", r"\1context true", rubric.read_text(encoding="utf-8"))
    if count != 1:
        raise ValueError(f"{rubric}: expected one `context` line to replace, found {count}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rubric.stem}-no-context.rubric"
    path.write_text(text, encoding="utf-8")
    return path


def learning_curve(setup: Setup, spec: RunSpec, out: Path, *, resume: bool = False,
                   on_iteration: Callable[[dict[str, Any]], None] | None = None,
                   on_evaluation: Callable[[CurvePoint], None] | None = None) -> Curve:
    """Train `spec` into `out`, then evaluate the untrained policy and every checkpoint, each point saved in
    `out/points`. `resume`: `out` holds this spec's run, killed part way; training continues from its last
    checkpoint (the trainer's exact resume) and the points already evaluated are read back, not played again."""
    started = time.perf_counter()
    if spec.threads:  # 0: torch's default
        torch.set_num_threads(spec.threads)
    config = run_config(spec, setup, out)
    result = train(config, out=out, resume=resume, make_env=lambda: _environment(setup, spec),
                   on_iteration=on_iteration)
    curve = Curve(spec=spec, train_metrics=result.metrics)
    policy = Policy.load(spec.model, spec.lora, device=spec.device, seed=spec.seed)  # the untrained start
    for iteration in [0, *range(spec.eval_every, spec.iterations + 1, spec.eval_every)]:
        saved = out / "points" / f"iter_{iteration:06d}.json"
        if resume and saved.is_file():
            point = _read_point(saved)
        else:
            if iteration:
                state = _adapter_state(out / "checkpoints" / f"iter_{iteration:06d}" / "adapter")
                policy.load_adapter_state(state)
            point = _evaluate_point(policy, setup, spec, iteration)
            write_atomic(saved, [json.dumps(asdict(point))])
        curve.points.append(point)
        if on_evaluation is not None:
            on_evaluation(point)
    curve.seconds = time.perf_counter() - started
    return curve


def start_run_folder(out: Path, key: dict[str, Any], *, continue_from: Path | None = None) -> Path | None:
    """The checkpoint the run in `out` resumes from: `out`'s own, if it holds a killed run of `key` (its
    `spec.json`); else `continue_from`'s last, a finished shorter run of the same settings copied in to train on;
    else None, `out` emptied. `out` is then marked as `key`'s (any JSON-able settings)."""
    marker, key = out / "spec.json", json.loads(json.dumps(key, default=str))
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == key and \
            (checkpoint := latest_checkpoint(out)) is not None:
        return checkpoint
    shutil.rmtree(out, ignore_errors=True)
    if continue_from is None:
        out.mkdir(parents=True)
    else:
        shutil.copytree(continue_from, out)
    write_atomic(marker, [json.dumps(key) + "\n"])  # a kill mid-write leaves no half marker to stop the next start
    return latest_checkpoint(out)


def _evaluate_point(policy: Any, setup: Setup, spec: RunSpec, iteration: int) -> CurvePoint:
    sampled = evaluate(policy, setup, spec)
    greedy = evaluate(policy, setup, spec, greedy=True) if spec.eval_greedy else None
    return CurvePoint(rollouts=iteration * spec.rollouts_per_iteration, success=sampled.success,
                      reward=sampled.reward, wins=sampled.wins, greedy=greedy.success if greedy else None,
                      greedy_wins=tuple(w[0] for w in greedy.wins) if greedy else ())


def _read_point(path: Path) -> CurvePoint:
    saved = json.loads(path.read_text(encoding="utf-8"))
    return CurvePoint(**saved | {"wins": tuple(tuple(w) for w in saved["wins"]),
                                 "greedy_wins": tuple(saved["greedy_wins"])})


def _environment(setup: Setup, spec: RunSpec) -> FamilyEnvironment:
    """The family's environment; its observations list the commands only to a policy that writes one."""
    return FamilyEnvironment(setup.family, setup.games, list_commands=spec.action_mode == "generate")


def _adapter_state(folder: Path) -> dict[str, Any]:
    return load_file(str(folder / "adapter_model.safetensors"))


@dataclass(frozen=True)
class Evaluation:
    success: float
    reward: float  # mean points share
    wins: tuple[tuple[float, ...], ...]  # (games, episodes)


def evaluate(policy: Any, setup: Setup, spec: RunSpec, seeds: Sequence[int] | None = None, *,
             greedy: bool = False) -> Evaluation:
    """Held-out success of `policy`: `spec.eval_episodes` episodes a game sampled from the fixed eval stream, or
    (`greedy`) one episode a game taking the most likely command."""
    seeds = setup.family.eval_seeds if seeds is None else seeds
    per_game = 1 if greedy else spec.eval_episodes
    episodes = play(policy, setup, spec, seeds, episodes=per_game, stream=EVAL_STREAM, greedy=greedy)
    wins = tuple(tuple(float(e.success) for e in episodes[g * per_game:(g + 1) * per_game]) for g in range(len(seeds)))
    return Evaluation(success=float(np.mean([e.success for e in episodes])),
                      reward=float(np.mean([e.trajectory.get("game_score", float(e.success)) for e in episodes])),
                      wins=wins)


def play(policy: Any, setup: Setup, spec: RunSpec, seeds: Sequence[int], *, episodes: int, stream: int,
         greedy: bool = False, make_env: Callable[[], Any] | None = None) -> list[EpisodeRollout]:
    """`episodes` episodes of each game in `seeds` (game by game) with `policy`'s trained adapter folded in,
    sampled at temperature 1 from random stream `stream`, or greedily; `make_env` plays other games than the
    family's (the family's environment by default). At most `spec.eval_batch` episodes run at once (whole games;
    each episode's random stream is its game's index and its own, whatever the batch)."""
    template = TurnTemplate(policy.tokenizer)
    pad = policy.tokenizer.pad_token_id
    sampler = KVCacheSampler(policy.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=int(pad if pad is not None else 0), choice_score=spec.choice_score, greedy=greedy)
    rollout = RolloutSection(max_new_tokens=spec.max_new_tokens, max_context_tokens=spec.max_context_tokens,
                             action_mode=spec.action_mode)
    engine = RolloutEngine(sampler, template, make_env or (lambda: _environment(setup, spec)), rollout,
                           max_turns=setup.family.max_turns)
    tasks = [GroupTask(group=i, seed=seed) for i, seed in enumerate(seeds)]
    games_at_once = max(1, spec.eval_batch // episodes if spec.eval_batch else len(tasks))
    policy.model.eval()
    with torch.no_grad(), policy.merged():
        return [rollout for start in range(0, len(tasks), games_at_once)
                for rollout in engine.run(tasks[start:start + games_at_once], group_size=episodes, seed=stream,
                                          iteration=0)]


def rollouts_to_reach(curve: Curve, target: float) -> int | None:
    """The first evaluated rollout count after training began whose held-out success is >= `target` (None: never;
    the untrained policy's point does not count, or a method would "reach" a target no training beat at 0)."""
    return next((p.rollouts for p in curve.points if p.rollouts > 0 and p.success >= target - 1e-12), None)


def curve_band(runs: Sequence[Curve]) -> tuple[list[float], list[float]] | None:
    """Each point's 95% interval of held-out success over the runs' seeds and games (`success_interval`, the one
    the tables print); None where a point carries no episode wins."""
    points = list(zip(*(run.points for run in runs), strict=True))
    if not all(p.wins for same in points for p in same):
        return None
    intervals = [success_interval(np.stack([np.asarray(p.wins, dtype=float) for p in same])) for same in points]
    return [i.low for i in intervals], [i.high for i in intervals]


def plot_curves(curves: dict[str, Sequence[Curve]], path: Path, *, title: str) -> Path:
    """Held-out success vs rollouts, one line per method (the mean over its seeds) and its 95% interval over seeds
    and games as a band (`curve_band`; the min-max over seeds where points carry no wins); drawn on a bare `Figure`
    with the Agg canvas, never through `pyplot`."""
    figure = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    for label, runs in curves.items():
        x = [p.rollouts for p in runs[0].points]
        y = np.array([[p.success for p in run.points] for run in runs])
        line, = axis.plot(x, y.mean(axis=0), marker="o", label=f"{label} ({len(runs)} seed{'s' * (len(runs) > 1)})")
        band = curve_band(runs) or ((list(y.min(axis=0)), list(y.max(axis=0))) if len(runs) > 1 else None)
        if band:
            axis.fill_between(x, *band, alpha=0.2, color=line.get_color())
    axis.set_ylim(bottom=0)
    axis.set_xlabel("training rollouts (episodes)")
    axis.set_ylabel("held-out success rate")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path
