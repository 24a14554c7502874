"""SFT-gold: supervised fine-tuning of one LoRA adapter on the capability environments' gold episodes.

    adapter = train_gold_sft(config, [Path("examples/envs/tool_calling_precision.rubric"), ...], Path("runs/sft"),
                             settings=GoldSFTSettings(epochs=4, tasks=16))   # out/checkpoints/iter_000004/adapter

The baseline that sees what TRACE's capability adapters see, the same environments and their solutions, and learns
them by imitation, without a reward. What it trains on: for every environment and task seed `first_seed ..
first_seed + tasks - 1`, the gold episode is played through the trainer's rollout engine by a script sampler
(`rollouts.script_sampler`), so its tokens are exactly a rollout's (the system prompt and tools, the user's and the
tools' turns, the end-of-turn tokens): its turns are the solution's tool calls, one a turn, in the environment's own
call format (`call_format`), then the gold agent's message to the user with every value the task asks for
(`envs.capability.validate.GoldAgent`). Every gold episode must succeed (its environment's `success`, not
truncated), else a ConfigError names the environment and the seed.
How: AdamW on the adapter (`[lora]`, initialised from `run.seed`) at `settings.lr`, with `[optim]`'s betas, weight
decay and gradient clipping, set up, resumed and checkpointed as the GRPO trainer's (`grpo.training`); `epochs`
passes, each over all the episodes of all the environments shuffled (seeded by run seed and epoch), in mini-batches
of `mini_batch` episodes, one step each. The loss is the negative log-likelihood of the action tokens (the rollout's
loss mask, `rollout.loss_tokens`: the agent's turns, never the prompt or the tools' results), averaged over the
mini-batch's tokens, scored at temperature 1 by the packed log-prob path (`policy.packing`,
`policy.logprobs.sequence_logprobs`, the learner's `row_width`), in micro-batches of at most
`optim.micro_batch_tokens` tokens (the learner's `micro_batches`) whose gradients accumulate.

The folder `out`: `metrics.jsonl` (one line per epoch: `loss`, the mean over the epoch's action tokens, each taken
before its step; `tokens`; `steps`; `grad_norm`; `seconds`), `checkpoints/iter_E/` (the trainer's checkpoint after
epoch E: `adapter/` in peft's format, `trainer_state.pt`, `config.toml`; the newest is kept), and `gold_sft.json`,
written atomically: the key of the inputs (the settings; what is read of the config, `model`, `lora`, the rollout's
context, turn length and loss tokens, the optimizer's settings above and `run.seed`; each environment's file name and
text), whether training finished, and the adapter.
Called again with the same key, a finished run is returned as it is, an unfinished one continues from its newest
checkpoint (adapter, optimizer and RNG states); with another key it is trained afresh. A folder holding checkpoints
that are not an SFT-gold run's is refused.
Left out: learning-rate schedules, data-parallel training, and SFT on anything but the gold agent's episodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tracec.dsl.errors import CheckError
from tracec.trace_rl.envs import capability
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.capability.validate import GoldAgent
from tracec.trace_rl.grpo.config import TrainConfig, config_to_dict
from tracec.trace_rl.grpo.learner import micro_batches, row_width
from tracec.trace_rl.grpo.run_folder import checkpoint_dir, latest_checkpoint
from tracec.trace_rl.grpo.training import load_policy, start_training
from tracec.trace_rl.policy.catalog import require_device
from tracec.trace_rl.policy.logprobs import sequence_logprobs
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.packing import PackedBatch, pack_sequences
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.script_sampler import ScriptError, ScriptSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

from tracec.atomic import write_atomic
from tracec.config_io import ConfigError, require

MARKER, METRICS = "gold_sft.json", "metrics.jsonl"
# What the adapter depends on in the trainer's config, by section (None: all of it), and run.seed: the key covers it.
READ: dict[str, tuple[str, ...] | None] = {
    "model": None, "lora": None, "rollout": ("max_context_tokens", "max_new_tokens", "loss_tokens"),
    "optim": ("betas", "weight_decay", "max_grad_norm", "micro_batch_tokens")}


@dataclass(frozen=True, kw_only=True)
class GoldSFTSettings:
    epochs: int = 4  # passes over every gold episode
    lr: float = 1e-4  # AdamW's learning rate
    tasks: int = 16  # gold episodes per environment: task seeds first_seed .. first_seed + tasks - 1
    first_seed: int = 0
    mini_batch: int = 8  # episodes per optimizer step

    def __post_init__(self) -> None:
        require(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1; try 4")
        require(0 < self.lr < 1, "lr", self.lr, "a learning rate in (0, 1); try 1e-4")
        require(self.tasks >= 1, "tasks", self.tasks, "an integer >= 1 (gold episodes per environment); try 16")
        require(self.first_seed >= 0, "first_seed", self.first_seed, "seeds are integers >= 0")
        require(self.mini_batch >= 1, "mini_batch", self.mini_batch, "an integer >= 1 (episodes per step); try 8")


def train_gold_sft(config: TrainConfig, environments: Sequence[Path], out: Path, *,
                   settings: GoldSFTSettings) -> Path:
    """Train (or continue, or find finished) the SFT-gold adapter of `environments` in `out`; its adapter folder."""
    out = Path(out)
    if not environments:
        raise ConfigError("SFT-gold: no capability environment to learn from; name at least one `.rubric` file")
    key = inputs_key(config, environments, settings)
    marker = _read_marker(out)
    if marker is not None and marker.get("key") == key and marker.get("finished"):
        found = out / str(marker.get("adapter"))
        if (found / "adapter_config.json").is_file():
            return found
    require_device(config.model.device, "model.device")  # a finished run is found without it, a new one needs it
    if marker is None or marker.get("key") != key:
        _start_afresh(out, had_marker=marker is not None)
        _write_marker(out, key, settings, environments, finished=False)
    policy = load_policy(config, config.model.device)
    episodes = [e for path in environments for e in gold_episodes(policy.tokenizer, Path(path), settings=settings,
                                                                 rollout=config.rollout)]
    training = start_training(policy, config, lr=settings.lr, schedule=None, resume_from=latest_checkpoint(out))
    log = training.metrics_log(out / METRICS)
    for epoch in range(training.start, settings.epochs):
        log.append(_epoch(policy, training.optimizer, episodes, config, settings, epoch))
        training.save(out, config, iteration=epoch + 1, data_position=0, keep=1)
    # settings.epochs >= 1, and a resumed run has a checkpoint
    assert training.checkpoint is not None
    adapter = training.checkpoint / "adapter"
    _write_marker(out, key, settings, environments, finished=True, adapter=adapter.relative_to(out).as_posix(),
                  episodes=len(episodes), tokens=sum(int(e.loss_mask.sum()) for e in episodes))
    return adapter


def gold_episodes(tokenizer: Any, environment: Path, *, settings: GoldSFTSettings,
                  rollout: RolloutSection) -> list[EpisodeRollout]:
    """The gold agent's episode of each task seed of one environment, as the rollout engine records them; each must
    succeed. The rollout section's layout applies (context, turn length, loss tokens); written turns, never hints."""
    try:
        program = load_environment(str(environment))
    except FileNotFoundError:
        raise ConfigError(f"{environment}: no such capability environment file") from None
    except CheckError as error:
        raise ConfigError(f"{environment}: not a usable capability environment:\n{error}") from None
    envs: list[capability.CapabilityEnvironment] = []

    def make() -> capability.CapabilityEnvironment:
        envs.append(capability.CapabilityEnvironment(program))
        return envs[-1]

    def script(key: int, turn: int) -> str:
        return gold_turn(envs[key], turn)

    template = TurnTemplate(tokenizer)
    section = dataclasses.replace(rollout, action_mode="generate", hint_ratio=(0.0, 0.0))
    # The gold episode needs its calls and the closing message; the environment's own step limit still applies.
    engine = RolloutEngine(ScriptSampler(template, script), template, make, section, max_turns=program.limits.max_steps)
    seeds = range(settings.first_seed, settings.first_seed + settings.tasks)
    try:
        episodes = engine.run([GroupTask(group=i, seed=seed) for i, seed in enumerate(seeds)], group_size=1, seed=0,
                              iteration=0)
    except ScriptError as error:
        raise ConfigError(f"{environment}: turn {error.turn} of the gold episode of task seed "
                          f"{seeds[error.key]}: {error.problem}") from None
    for episode in episodes:
        if episode.truncated:
            raise ConfigError(f"{environment}: the gold episode of task seed {episode.seed} does not fit "
                              f"rollout.max_context_tokens = {rollout.max_context_tokens} (cut after {episode.turns} "
                              f"turns, {len(episode.token_ids)} tokens); raise rollout.max_context_tokens")
        if not episode.success:
            raise ConfigError(f"{environment}: the gold episode of task seed {episode.seed} does not succeed (reward "
                              f"{episode.reward:g} after {episode.turns} turns): the environment's solution does not "
                              "solve its task; check it with `tracec env validate`")
    return episodes


def gold_turn(env: capability.CapabilityEnvironment, turn: int) -> str:
    """The gold agent's turn `turn` (from 0) of `env`'s episode: a call of the solution in the environment's own
    call format, then the gold agent's message to the user."""
    # The gold agent reads only how many turns it has taken (`turns_taken`).
    return GoldAgent(env).act([{"role": "assistant", "content": ""}] * turn)


def pack_actions(episodes: Sequence[EpisodeRollout], *, row_tokens: int, pad_id: int) -> PackedBatch:
    """The episodes packed for one forward, their action tokens (the loss mask) the tokens scored."""
    return pack_sequences([e.token_ids.tolist() for e in episodes], [e.loss_mask.tolist() for e in episodes],
                          max_tokens_per_row=row_width([len(e.token_ids) for e in episodes], row_tokens),
                          pad_id=pad_id)


def action_nll(policy: Policy, episodes: Sequence[EpisodeRollout], *, row_tokens: int,
               micro_batch_tokens: int) -> tuple[float, int]:
    """The summed negative log-likelihood of the episodes' action tokens under the policy and their count (no
    gradient): the loss of the episodes as one mini-batch is the first over the second."""
    with torch.no_grad():
        return _accumulate(policy, episodes, row_tokens=row_tokens, micro_batch_tokens=micro_batch_tokens,
                           backward=False)


def _epoch(policy: Policy, optimizer: torch.optim.Optimizer, episodes: Sequence[EpisodeRollout],
           config: TrainConfig, settings: GoldSFTSettings, epoch: int) -> dict[str, Any]:
    """One shuffled pass of steps over `episodes`; its metrics line."""
    began = time.perf_counter()
    order = np.random.default_rng([config.run.seed, epoch]).permutation(len(episodes))
    total = tokens = 0.0
    norms = []
    policy.model.train()  # LoRA dropout, if any, acts in the update only
    for first in range(0, len(order), settings.mini_batch):
        chunk = [episodes[i] for i in order[first:first + settings.mini_batch]]
        nll, count = _accumulate(policy, chunk, row_tokens=config.rollout.max_context_tokens,
                                 micro_batch_tokens=config.optim.micro_batch_tokens, backward=True)
        norms.append(float(torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(),
                                                          config.optim.max_grad_norm or float("inf"))))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        total, tokens = total + nll, tokens + count
    policy.model.eval()
    # "iteration" is the trainer's key (MetricsLog keeps the lines through a resumed checkpoint by it): one epoch.
    return {"iteration": epoch + 1, "epoch": epoch + 1, "loss": total / max(tokens, 1), "tokens": int(tokens),
            "episodes": len(episodes), "steps": len(norms), "grad_norm": float(np.mean(norms)),
            "seconds": time.perf_counter() - began}


def _accumulate(policy: Policy, episodes: Sequence[EpisodeRollout], *, row_tokens: int, micro_batch_tokens: int,
                backward: bool) -> tuple[float, int]:
    """The summed NLL of the action tokens of `episodes` and their count; with `backward`, the gradient of their
    mean (the summed NLL over the count) accumulated, one micro-batch of at most `micro_batch_tokens` at a time."""
    count = sum(int(e.loss_mask.sum()) for e in episodes)
    pad = policy.tokenizer.pad_token_id
    total = 0.0
    for part in micro_batches([len(e.token_ids) for e in episodes], micro_batch_tokens):
        micro = [episodes[i] for i in part]
        batch = pack_actions(micro, row_tokens=max(row_tokens, *(len(e.token_ids) for e in micro)),
                             pad_id=int(pad if pad is not None else 0))
        logprobs: list[Tensor] = sequence_logprobs(policy.model, batch, temperature=1.0)  # type: ignore[assignment]
        nll = -torch.cat(logprobs).sum()
        if backward:
            (nll / max(count, 1)).backward()
        total += float(nll.detach())
    return total, count


def inputs_key(config: TrainConfig, environments: Sequence[Path], settings: GoldSFTSettings) -> str:
    """SHA-256 of what the adapter depends on: the settings, the config sections read, the environments' texts."""
    sections = config_to_dict(config)
    files = []
    for path in map(Path, environments):
        try:
            files.append([path.name, hashlib.sha256(path.read_bytes()).hexdigest()])
        except OSError as error:
            raise ConfigError(f"{path}: cannot read the capability environment ({error.strerror})") from None
    read = {name: sections[name] if keys is None else {key: sections[name][key] for key in keys}
            for name, keys in READ.items()}
    inputs = {"settings": dataclasses.asdict(settings), "seed": config.run.seed, "environments": files, **read}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _read_marker(out: Path) -> dict[str, Any] | None:
    path = out / MARKER
    if not path.exists():
        return None
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not an SFT-gold record ({error}); delete it to train afresh") from None
    if not isinstance(marker, dict):
        raise ConfigError(f"{path}: not an SFT-gold record (a JSON object); delete it to train afresh")
    return marker


def _start_afresh(out: Path, *, had_marker: bool) -> None:
    """Clear an SFT-gold run made from other inputs; refuse a folder holding another kind of run."""
    if not had_marker and (latest_checkpoint(out) is not None or (out / METRICS).exists()):
        raise ConfigError(f"{out} holds a run that is not an SFT-gold one (it has no {MARKER}); choose another folder")
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    (out / METRICS).unlink(missing_ok=True)


def _write_marker(out: Path, key: str, settings: GoldSFTSettings, environments: Sequence[Path], *, finished: bool,
                  **done: Any) -> None:
    record = {"key": key, "finished": finished, "settings": dataclasses.asdict(settings),
              "environments": [str(path) for path in environments], **done}
    write_atomic(out / MARKER, [json.dumps(record, indent=2) + "\n"])
