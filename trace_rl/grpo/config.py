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
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.dsl.defaults import STEP_SCALES
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT
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


@dataclass(frozen=True, kw_only=True)
class CapabilityEnvSection:
    path: str = ""  # the `.rubric` file holding the environment
    name: str = ""  # which environment of the file; "" = its only one
    user: str = "scripted"  # scripted: consents, closes on "done" | llm: user_model plays the task's user (LLMUser)
    user_model: str = "smollm2-135m-instruct"  # the llm user's model (no adapter): a name, a folder, or "tiny"

    def __post_init__(self) -> None:
        choice("user", self.user, ("scripted", "llm"))


@dataclass(frozen=True, kw_only=True)
class TextWorldEnvSection:
    game: str = ""  # a game file (.z8 or .ulx) every seed plays; "" = a task family: seed N makes game N
    challenge: str = "custom"  # the family: custom | tw-simple | tw-cooking (`tw-make` challenges)
    world_size: int = 3  # custom: rooms; tw-cooking: 1, 6, 9 or 12
    nb_objects: int = 5  # custom
    quest_length: int = 3  # custom: actions of the quest
    rewards: str = "dense"  # tw-simple: dense | balanced | sparse
    goal: str = "detailed"  # tw-simple: detailed | brief | none
    recipe: int = 1  # tw-cooking: ingredients
    take: int = 1  # tw-cooking: of which to find
    skills: tuple[str, ...] = ()  # tw-cooking: open, cook, cut, drop
    show_admissible: bool = True  # list the admissible commands in each observation
    cache: str = ""  # where made games are kept; "" = $TRACEC_CACHE_DIR/textworld (default ~/.cache/tracec)

    def __post_init__(self) -> None:
        choice("challenge", self.challenge, ("custom", "tw-simple", "tw-cooking"))
        for name in ("world_size", "nb_objects", "quest_length", "recipe"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        choice("rewards", self.rewards, ("dense", "balanced", "sparse"))
        choice("goal", self.goal, ("detailed", "brief", "none"))
        require(0 <= self.take <= self.recipe, "take", self.take, f"an integer in 0..recipe ({self.recipe})")
        for skill in self.skills:
            choice("skills", skill, ("open", "cook", "cut", "drop"))
        require(self.challenge != "tw-cooking" or self.world_size in (1, 6, 9, 12), "world_size", self.world_size,
                 "tw-cooking games have 1, 6, 9 or 12 rooms")


@dataclass(frozen=True, kw_only=True)
class Tau2EnvSection:
    domain: str = "airline"  # airline | retail
    data: str = ""  # the tau2-bench data folder; "" = $TRACEC_TAU2_DATA or shared/data/tau2 beside the repo
    user: str = "llm"  # llm: the benchmark's user simulator on user_model | scripted: opens, consents, never ends
    user_model: str = "smollm2-135m-instruct"  # the simulator's model (no adapter): a name, a folder, or "tiny"

    def __post_init__(self) -> None:
        choice("domain", self.domain, ("airline", "retail"))
        choice("user", self.user, ("llm", "scripted"))


@dataclass(frozen=True, kw_only=True)
class PythonEnvSection:
    factory: str = ""  # "package.module:function": called with no arguments, it returns a fresh environment

    def __post_init__(self) -> None:
        require(not self.factory or re.fullmatch(r"[\w.]+:[\w.]+", self.factory) is not None, "factory",
                 self.factory, "write \"package.module:function\" (a callable returning a fresh environment)")


@dataclass(frozen=True, kw_only=True)
class MixtureEnvSection:
    paths: tuple[str, ...] = ()  # capability environments' `.rubric` files (each file's only environment)
    weights: tuple[float, ...] = ()  # one per path, in proportion; () = uniform

    def __post_init__(self) -> None:
        require(not self.weights or len(self.weights) == len(self.paths), "weights", self.weights,
                 f"give one weight per path ({len(self.paths)}), or leave it out for uniform weights")
        require(all(w >= 0 for w in self.weights) and (not self.weights or sum(self.weights) > 0), "weights",
                 self.weights, "non-negative numbers, not all 0 (a seed's component is drawn in proportion)")

    @property
    def resolved_weights(self) -> tuple[float, ...]:
        return self.weights or (1.0,) * len(self.paths)


@dataclass(frozen=True, kw_only=True)
class EnvSection:
    kind: str = "capability"  # capability | textworld | tau2 | python (your own environment class) | mixture
    first_seed: int = 0  # task instances are seeds first_seed .. first_seed + num_seeds - 1
    num_seeds: int = 1000
    max_turns: int = 8  # agent turns per episode; the environment may end it sooner
    capability: CapabilityEnvSection = CapabilityEnvSection()
    textworld: TextWorldEnvSection = TextWorldEnvSection()
    tau2: Tau2EnvSection = Tau2EnvSection()
    python: PythonEnvSection = PythonEnvSection()
    mixture: MixtureEnvSection = MixtureEnvSection()  # multi-capability GRPO: capability environments, weighted
    call_format: str = DEFAULT_CALL_FORMAT  # tool environments (capability, tau2): native (tools as JSON schemas
    #   through the chat template, calls as <tool_call>{...}</tool_call>) | text (tools listed in the system prompt,
    #   <action>)

    def __post_init__(self) -> None:
        choice("call_format", self.call_format, CALL_FORMATS)
        choice("kind", self.kind, ("capability", "textworld", "tau2", "python", "mixture"))
        require(self.first_seed >= 0, "first_seed", self.first_seed, "seeds are integers >= 0")
        require(self.num_seeds >= 1, "num_seeds", self.num_seeds, "an integer >= 1")
        require(1 <= self.max_turns <= 1000, "max_turns", self.max_turns, "an integer in 1..1000")
        require(self.kind != "capability" or bool(self.capability.path), "capability.path", self.capability.path,
                 "a capability environment needs its `.rubric` file, e.g. "
                 "env.capability.path = \"examples/envs/tool_calling_precision.rubric\"")
        require(self.kind != "python" or bool(self.python.factory), "python.factory", self.python.factory,
                 "name the factory of your environment, e.g. env.python.factory = \"mypackage.envs:make_env\"")
        require(self.kind != "mixture" or bool(self.mixture.paths), "mixture.paths", self.mixture.paths,
                 "a mixture names its capability environments, e.g. env.mixture.paths = "
                 "[\"examples/envs/multi_step_completion.rubric\", \"examples/envs/precondition_verification.rubric\"]")


@dataclass(frozen=True, kw_only=True)
class AdvantageSection:
    kind: str = "grpo"  # grpo: the episode's group advantage | trca: per step A = A_E + A_S from a rubric |
    #   oracle: +1 on a step that follows the shortest winning plan, -1 elsewhere (the learnability gate)
    oracle: str = "signed"  # oracle: signed (+1 / -1) | imitation (1 / pi_old(c|s) on the plan, 0 elsewhere)
    scale: str = "std"  # grpo: std (divide by the group's std) | none (Dr. GRPO)
    rubric: str = ""  # trca: the `.rubric` file of the rubric
    rubric_name: str = ""  # trca: which rubric of the file; "" = its only one
    lam: float | None = None  # trca: overrides the rubric's lambda
    gamma: float | None = None  # trca: overrides the rubric's gamma
    step_scale: str | None = None  # trca: overrides the rubric's step_scale (std | none: A_S centred only)
    filter_constant_groups: bool = True  # drop groups whose advantages are all 0: they teach nothing
    max_resample_batches: int = 0  # at most this many extra batches sampled to refill filtered groups

    def __post_init__(self) -> None:
        choice("kind", self.kind, ("grpo", "trca", "oracle"))
        choice("scale", self.scale, ("std", "none"))
        choice("oracle", self.oracle, ("signed", "imitation"))
        require(self.kind != "trca" or bool(self.rubric), "rubric", self.rubric,
                 "TRCA scores episodes with a rubric; e.g. advantage.rubric = \"examples/toolenv.rubric\"")
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
        if self.rollout.backend == "vllm" and self.model.device == "cpu":
            raise FieldError("rollout.backend", "vllm", "vLLM runs on GPUs; set model.device = \"cuda\" or use "
                       "rollout.backend = \"transformers\"")

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
    config = config_from_dict(data, where=str(path) if path is not None else "<defaults>", text=text,
                              sources=sources)
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    return _absolute_paths(config, {key: Path.cwd() if key in sources else base for key in (*PATH_KEYS, MODEL_KEY)})


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
# absolute, so that the copy saved beside a checkpoint names the same files; model.name too when it names a
# checkpoint folder there.
MODEL_KEY = "model.name"
PATH_KEYS = ("env.capability.path", "env.textworld.game", "env.textworld.cache", "env.tau2.data", "advantage.rubric",
             "env.mixture.paths")


def _expanded(path: str) -> Path:
    """`~` and `~user` expanded; a `~name` that names no user stays as written (a name, or a relative folder)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def absolute_path(value: str, base: Path) -> str:
    """A path a config names, made absolute: `~` and `~user` expanded, a relative one (a `~name` that names no
    user is one) resolved from `base`. The pipeline's config makes its paths absolute through this too."""
    expanded = _expanded(value)
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


def _absolute_paths(config: TrainConfig, bases: Mapping[str, Path]) -> TrainConfig:
    data = config_to_dict(config)
    # model.name is a model's name or a checkpoint folder: a folder beside the config is the config's, like any path
    folder, beside = _expanded(data["model"]["name"]), bases.get(MODEL_KEY, Path.cwd())
    if not folder.is_absolute() and (beside / folder / "config.json").is_file():
        data["model"]["name"] = str((beside / folder).resolve())
    for key, base in bases.items():
        if key == MODEL_KEY:
            continue
        *sections, name = key.split(".")
        table = data
        for section in sections:
            table = table[section]
        value = table.get(name)
        if isinstance(value, list):  # a list of files (env.mixture.paths)
            table[name] = [absolute_path(p, base) for p in value]
        elif value:
            table[name] = absolute_path(value, base)
    return config_from_dict(data)
