"""The trainer's configuration: frozen keyword-only sections, read from TOML with `--set key=value` overrides.

    config = load_config("examples/train/tool_calling_trca.toml", overrides=["rollout.group_size=8", "iterations=1"])
    save_config(config, "run/config.toml")       # beside every checkpoint; saved_config reads it back unchanged

A value is checked where it is declared (each section's `__post_init__`), and every error says which key, which
value, and what to write instead: `train.toml:7:1: error: rollout.group_size = 1: a group needs at least 2 episodes
(a group of one has no baseline); try rollout.group_size = 16`. An unknown key is answered with the closest known
one. In `--set`, a key that names one field unambiguously may drop its section (`iterations=1`); values are TOML
(`--set lora.targets='["q_proj"]'`), and a word that is not TOML reads as a string (`--set model.name=tiny`).
Left out: environment-variable overrides and config inheritance (one file says everything a run did).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.dsl.defaults import STEP_SCALES
from tracec.trace_rl.envs.config import CapabilityEnvSection, EnvSection
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.rollouts.section import RolloutSection

from tracec.atomic import write_atomic
from tracec.config_io import (
    ConfigError,
    FieldError,
    assign_override,
    build,
    choice,
    read_toml,
    require,
    to_dict,
    to_toml,
    with_absolute_paths,
)

__all__ = ["ConfigError", "TrainConfig", "config_from_dict", "config_to_dict", "config_to_toml", "load_config",
           "save_config"]


# ---------------------------------------------------------------------------------------------- sections


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    name: str = "smollm2-135m-instruct"  # an installed model (`tracec models`), "tiny", or a checkpoint folder
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 (GPU)
    threads: int = 0  # torch CPU threads; 0 leaves torch's default

    def __post_init__(self) -> None:
        require(bool(self.name), "name", self.name, "name a model: an installed one (`tracec models`), "
                 "\"tiny\", or a checkpoint folder")
        require(self.device == "cpu" or re.fullmatch(r"cuda(:\d+)?", self.device) is not None, "device",
                 self.device, "use \"cpu\", \"cuda\" or \"cuda:N\"")
        choice("dtype", self.dtype, ("float32", "bfloat16"))
        require(self.threads >= 0, "threads", self.threads, "use 0 (torch's default) or a positive count")


RUBRIC_CREDITS = ("trca", "shaped")  # the kinds of credit that score episodes with advantage.rubric
CREDIT_NAMES = {"trca": "TRCA", "shaped": "shaped GRPO"}


@dataclass(frozen=True, kw_only=True)
class AdvantageSection:
    kind: str = "grpo"  # grpo: the episode's group advantage | trca: per step A = A_E + A_S from a rubric |
    #   gigpo: A_E + step_weight * A_S over anchor states (GiGPO) | shaped: GRPO on the rubric's episode return |
    #   oracle: +1 on a step that follows the shortest winning plan, -1 elsewhere (the learnability gate)
    oracle: str = "signed"  # oracle: signed (+1 / -1) | imitation (1 / pi_old(c|s) on the plan, 0 elsewhere)
    scale: str = "std"  # grpo, gigpo, shaped: std (divide by the group's std) | none (Dr. GRPO, GiGPO's mean_norm)
    rubric: str = ""  # trca, shaped: the `.rubric` file of the rubric
    rubric_name: str = ""  # trca, shaped: which rubric of the file; "" = its only one
    lam: float | None = None  # trca, shaped: overrides the rubric's lambda
    gamma: float | None = None  # trca, shaped: overrides the rubric's gamma; gigpo: the step returns' (None: 0.95)
    step_weight: float = 1.0  # gigpo: omega, the step advantage's weight (the paper's 1)
    step_scale: str | None = None  # trca: overrides the rubric's step_scale (std | none: A_S centred only)
    filter_constant_groups: bool = True  # drop groups whose advantages are all 0: they teach nothing
    max_resample_batches: int = 0  # at most this many extra batches sampled to refill filtered groups

    def __post_init__(self) -> None:
        choice("kind", self.kind, ("grpo", "trca", "gigpo", "shaped", "oracle"))
        choice("scale", self.scale, ("std", "none"))
        choice("oracle", self.oracle, ("signed", "imitation"))
        require(self.kind not in RUBRIC_CREDITS or bool(self.rubric), "rubric", self.rubric,
                 f"{CREDIT_NAMES.get(self.kind, self.kind)} scores episodes with a rubric; "
                 "e.g. advantage.rubric = \"examples/toolenv.rubric\"")
        require(math.isfinite(self.step_weight) and self.step_weight >= 0, "step_weight", self.step_weight,
                 "a number >= 0 (GiGPO's omega; 1 in its paper)")
        for name in ("lam", "gamma"):
            value = getattr(self, name)
            require(value is None or 0 <= value <= 1, name, value, "a number in [0, 1], or leave it out to use "
                     "the rubric's")
        require(self.step_scale is None or self.step_scale in STEP_SCALES, "step_scale", self.step_scale,
                 f"{' or '.join(STEP_SCALES)}, or leave it out to use the rubric's")
        require(self.max_resample_batches >= 0, "max_resample_batches", self.max_resample_batches,
                 "an integer >= 0 (0 = never resample)")


@dataclass(frozen=True, kw_only=True)
class OptimSection:
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, ...] = (0.9, 0.999)
    max_grad_norm: float = 1.0  # 0 turns clipping off
    schedule: str = "constant"  # constant | linear | cosine (to 0 at the last iteration), after warmup
    warmup_iterations: int = 0
    epochs: int = 1  # passes over each batch
    mini_batches: int = 2  # optimizer steps per pass; after the first, the ratio differs from 1 and clipping acts
    micro_batch_tokens: int = 8192  # tokens per forward/backward; a mini-batch accumulates several

    def __post_init__(self) -> None:
        require(0 < self.lr < 1, "lr", self.lr, "a learning rate in (0, 1); try 1e-5 (TRACE) or 1e-4")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas", self.betas,
                 "two numbers in [0, 1); try [0.9, 0.999]")
        require(self.max_grad_norm >= 0, "max_grad_norm", self.max_grad_norm, "a number >= 0 (0 = no clipping)")
        choice("schedule", self.schedule, ("constant", "linear", "cosine"))
        require(self.warmup_iterations >= 0, "warmup_iterations", self.warmup_iterations, "an integer >= 0")
        require(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        require(self.mini_batches >= 1, "mini_batches", self.mini_batches, "an integer >= 1")
        require(self.micro_batch_tokens >= 1, "micro_batch_tokens", self.micro_batch_tokens,
                 "an integer >= 1; try 8192 (fewer saves memory, more saves time)")


@dataclass(frozen=True, kw_only=True)
class LossSection:
    clip_eps: float = 0.28
    dual_clip: float = 0.0  # c > 1 bounds a negative advantage's term by c A (dual-clip PPO; verl uses 3); 0 = off
    aggregation: str = "sequence_mean"  # sequence_mean (GRPO, TRACE) | token_mean (DAPO)
    kl_beta: float = 0.0  # weight of the k3 KL estimate to the base model (adapter disabled); 0 = off
    importance_cap: float = 3.0  # vllm rollouts: sequences whose trainer/sampler ratio exceeds it are masked
    level: str = "auto"  # token: ratio and clip on the chosen tokens | command: on log pi(c|s) over the
    #   admissible commands (the policy the admissible mode samples) | auto: command when admissible, else token
    entropy_coef: float = 0.0  # command level: weight of the candidates' entropy bonus (TRCA's paper: 0.001)
    target_kl: float = 0.0  # end an iteration's updates once a mini-batch's approximate KL exceeds it; 0 = never

    def __post_init__(self) -> None:
        require(0 < self.clip_eps < 1, "clip_eps", self.clip_eps, "a number in (0, 1); try 0.28")
        require(self.dual_clip == 0 or self.dual_clip > 1 + self.clip_eps, "dual_clip", self.dual_clip,
                 "0 (off) or a number above 1 + clip_eps; try 3.0")
        choice("aggregation", self.aggregation, ("sequence_mean", "token_mean"))
        require(self.kl_beta >= 0, "kl_beta", self.kl_beta, "a number >= 0 (0 = no KL term)")
        require(self.importance_cap >= 1, "importance_cap", self.importance_cap, "a number >= 1; try 3.0")
        choice("level", self.level, ("auto", "token", "command"))
        require(self.entropy_coef >= 0, "entropy_coef", self.entropy_coef, "a number >= 0; try 0.001")
        require(self.target_kl >= 0, "target_kl", self.target_kl, "a number >= 0 (0 = never stop early); try 0.02")


REPORTERS = ("tensorboard",)  # where a run's metrics may go besides metrics.jsonl (`run.report_to`)


@dataclass(frozen=True, kw_only=True)
class RunSection:
    iterations: int = 100
    checkpoint_every: int = 10  # iterations between checkpoints; the last iteration always writes one
    keep_checkpoints: int = 2  # the newest this many are kept; 0 keeps all
    seed: int = 0
    out: str = "runs/train"  # the run folder: metrics.jsonl, checkpoints/, curve.png (`--out` overrides it)
    report_to: tuple[str, ...] = ()  # also write the metrics for: "tensorboard" (event files in OUT/tensorboard/)

    def __post_init__(self) -> None:
        require(self.iterations >= 1, "iterations", self.iterations, "an integer >= 1")
        require(self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every, "an integer >= 1")
        require(self.keep_checkpoints >= 0, "keep_checkpoints", self.keep_checkpoints, "an integer >= 0")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(bool(self.out), "out", self.out, "name the run folder")
        for reporter in self.report_to:
            choice("report_to", reporter, REPORTERS)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A run's settings, each declared once: the rollout engine takes `rollout` (and `env.max_turns`), the learner
    the whole config."""

    model: ModelSection = ModelSection()
    lora: LoraSection = field(default_factory=LoraSection)
    env: EnvSection = field(default_factory=lambda: EnvSection(capability=CapabilityEnvSection(
        path="examples/envs/tool_calling_precision.rubric")))
    rollout: RolloutSection = field(default_factory=RolloutSection)
    advantage: AdvantageSection = AdvantageSection()
    optim: OptimSection = OptimSection()
    loss: LossSection = LossSection()
    run: RunSection = RunSection()

    def __post_init__(self) -> None:
        if self.loss.level == "command" and self.rollout.action_mode != "admissible":
            raise FieldError("loss.level", "command", "the command-level loss needs the admissible-command mode; set "
                             "rollout.action_mode = \"admissible\" or loss.level = \"token\"")
        if self.loss.entropy_coef and self.loss_level != "command":
            raise FieldError("loss.entropy_coef", self.loss.entropy_coef, "the entropy bonus acts on the command "
                             "level (admissible mode) only; set loss.entropy_coef = 0")
        if self.advantage.kind == "oracle" and self.advantage.oracle == "imitation" \
                and self.rollout.action_mode != "admissible":
            raise FieldError("advantage.oracle", "imitation", "the imitation weight is 1 / pi_old(c|s), which only the "
                             "admissible-command mode keeps; set rollout.action_mode = \"admissible\" or "
                             "advantage.oracle = \"signed\"")

    @property
    def loss_level(self) -> str:
        """The loss's level once `auto` is resolved: command in the admissible mode, token otherwise."""
        if self.loss.level != "auto":
            return self.loss.level
        return "command" if self.rollout.action_mode == "admissible" else "token"

    def replace(self, **sections: Any) -> TrainConfig:
        return dataclasses.replace(self, **sections)


# ---------------------------------------------------------------------------------------------- reading, writing


def load_config(path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config of a TOML file (or the defaults, for None) with `--set` overrides applied in order."""
    data, text = read_toml(str(path)) if path is not None else ({}, "")
    sources = {assign_override(TrainConfig, data, item): f"--set {item}" for item in overrides}
    where = str(path) if path is not None else "<defaults>"
    config = config_from_dict(data, where=where, text=text, sources=sources)
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    model_base = Path.cwd() if MODEL_KEY in sources else base
    keys = (*PATH_KEYS, MODEL_KEY) if _names_a_folder(config.model.name, model_base) else PATH_KEYS
    return with_absolute_paths(config, keys, base, where=where, text=text, sources=sources)


def saved_config(path: str | os.PathLike[str]) -> TrainConfig:
    """A run's own copy of its config (a checkpoint's `config.toml`) as it was saved: its paths are the run's, so
    they are read as written, not as relative to the checkpoint's folder as a user's file would be."""
    data, text = read_toml(str(path))
    return config_from_dict(data, where=str(path), text=text)


def config_from_dict(data: Mapping[str, Any], *, where: str = "<dict>", text: str = "",
                     sources: Mapping[str, str] | None = None) -> TrainConfig:
    """A config from nested mappings (TOML's shape); errors are located in `text` (the file) or `sources`."""
    config = build(TrainConfig, data, where=where, text=text, sources=sources)
    assert isinstance(config, TrainConfig)
    return config


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    """Nested plain values (tuples as lists, None left out): what `config_from_dict` reads back."""
    return to_dict(config)


def config_to_toml(config: TrainConfig) -> str:
    return to_toml(config)


def save_config(config: TrainConfig, path: str | os.PathLike[str]) -> None:
    write_atomic(path, [config_to_toml(config)])


# Files a config names: relative to the config file's folder (to the working folder when given by --set), stored
# absolute, so that the copy saved beside a checkpoint names the same files (`config_io.with_absolute_paths`);
# model.name too when it names a folder.
MODEL_KEY = "model.name"
PATH_KEYS = ("env.capability.path", "env.textworld.game", "env.textworld.cache", "env.tau2.data", "advantage.rubric",
             "env.mixture.paths")


def _names_a_folder(name: str, beside: Path) -> bool:
    """Whether model.name is a path (`~...`, or a checkpoint folder beside the config) rather than a model's name."""
    return name.startswith("~") or (beside / name / "config.json").is_file()
