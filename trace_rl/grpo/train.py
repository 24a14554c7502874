"""The GRPO trainer: one LoRA adapter on one environment, with sparse GRPO or TRCA step advantages.

    result = train(load_config("examples/train/tool_calling_trca.toml"))  # or: tracec train CONFIG.toml
    torchrun --nproc_per_node 2 -m tracec.cli train CONFIG.toml     # the same, data-parallel

Each iteration:
1. Rollouts: `groups_per_batch` task seeds from the run's stream; K = `group_size` episodes of each (a group shares
   the seed), every episode of the iteration decoded in one batch, multi-turn, token-in/token-out
   (`rollouts.engine`). Ranks split the groups.
2. Scoring: each loss token's advantage (`credit`): the episode's group-normalised reward (GRPO), or its step's
   A = A_E + A_S from the compiled rubric (TRCA). Only the action tokens of each turn carry it (at the command
   level of the admissible mode, each turn's log pi(c|s) over its candidate commands does).
3. Filtering: groups whose advantages are all zero teach nothing; they are dropped, and up to
   `max_resample_batches` further batches are sampled to refill the batch (DAPO's dynamic sampling, bounded).
4. Learning: epochs x mini-batches of AdamW steps on the clipped surrogate (`learner`, `loss`), old
   log-probs from the sampler, optional k3 KL to the base model (the adapter disabled), an optional entropy bonus
   and KL target; each step's trust-region diagnostics (ratio quantiles, KL to the sampler, clip fraction,
   gradient norm) go to the metrics.
5. Bookkeeping: metrics to `metrics.jsonl` and the console (and TensorBoard, `run.report_to`), a checkpoint every
   `checkpoint_every` iterations (`checkpoint`), the adapter synced to the rollout engine when it is not the
   training model itself (vLLM). A non-finite loss, gradient or weight stops the run before anything of its
   iteration is saved (`divergence.DivergedError`): the newest checkpoint stays the last good one.

What this leaves out of GRPO as papers describe it: a separate frozen reference model (the base is the adapter
switched off), a value function or any critic, reward models (rewards are the environment's and the rubric's),
per-token advantages within a step, the token-level loss's entropy bonus, and asynchronous (off-policy) rollouts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tracec.runtime.evaluate import RubricScorer
from tracec.trace_rl.envs.protocol import EnvironmentFactory
from tracec.trace_rl.grpo.checkpoint import TrainerState, capture_rng, load_checkpoint, restore_rng, save_checkpoint
from tracec.trace_rl.grpo.config import ConfigError, TrainConfig
from tracec.trace_rl.grpo.credit import (
    check_rubric_fits,
    constant_groups,
    episode_token_advantages,
)
from tracec.trace_rl.grpo.distributed import Distributed, process_group
from tracec.trace_rl.grpo.divergence import DivergedError
from tracec.trace_rl.grpo.environments import TaskStream, environment_factory
from tracec.trace_rl.grpo.learner import Learner, LearnSequence, SequenceInfo
from tracec.trace_rl.grpo.report import MetricsLog, TensorBoardLog, import_tensorboardx, plot_curve
from tracec.trace_rl.grpo.run_folder import check_run_dir, checkpoint_dir
from tracec.trace_rl.llm.vllm_backend import import_vllm
from tracec.trace_rl.policy.catalog import require_device
from tracec.trace_rl.policy.choice_policy import tree_length
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.rollouts.vllm_sampler import VLLMSampler


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    run_dir: Path
    adapter: Path  # the last checkpoint's adapter folder
    metrics: list[dict[str, Any]]  # one record per iteration of this run, resumed ones included
    policy: Policy


@dataclass
class Batch:
    """What one iteration learns from, on this rank, and what it measured on the way."""

    sequences: list[LearnSequence]
    table: list[SequenceInfo]
    metrics: dict[str, float]


def train(config: TrainConfig, *, out: str | Path | None = None, resume: bool = False,
          make_env: EnvironmentFactory | None = None,
          on_iteration: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Run (or, with `resume`, continue) the training `config` describes; `make_env` overrides `[env]`."""
    # `_train` holds the Learner, whose DDP wrapper holds the group: gone (returned, or its frames cleared) by the
    # time the block ends the group
    with process_group(config.model.device) as (dist, device):
        return _train(config, Path(out or config.run.out), resume, make_env, on_iteration, dist, device)


@dataclass
class _Run:
    """Everything one training run holds between iterations."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    stream: TaskStream
    sampler: Any
    engine: RolloutEngine
    learner: Learner
    scorer: RubricScorer | None
    start: int  # iterations already done (a resumed run)
    adapter: Path | None  # the newest checkpoint's adapter


def _train(config: TrainConfig, run_dir: Path, resume: bool, make_env: EnvironmentFactory | None,
           on_iteration: Callable[[dict[str, Any]], None] | None, dist: Distributed, device: str) -> TrainResult:
    # The checkpoints' copy of the config names the folder the run writes to, which --out may have chosen.
    config = config.replace(run=dataclasses.replace(config.run, out=str(run_dir.resolve())))
    run = _setup(config, run_dir, resume, make_env, dist, device)
    if dist.is_main:
        checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)  # the folder is a run's now (`run_started`)
    log = MetricsLog(run_dir / "metrics.jsonl", keep_through=run.start, enabled=dist.is_main)
    tensorboard = "tensorboard" in config.run.report_to and dist.is_main
    with contextlib.closing(TensorBoardLog(run_dir / "tensorboard", first_iteration=run.start + 1)) if tensorboard \
            else contextlib.nullcontext() as board:
        for iteration in range(run.start, config.run.iterations):
            metrics = _iterate_or_stop(run, config, dist, iteration, run_dir)
            log.append(metrics)
            if board is not None:
                board.append(metrics)
            if on_iteration is not None and dist.is_main:
                on_iteration(metrics)
            if (iteration + 1) % config.run.checkpoint_every == 0 or iteration + 1 == config.run.iterations:
                state = TrainerState(iteration=iteration + 1, data_position=run.stream.position,
                                     optimizer=run.optimizer.state_dict(), scheduler=run.scheduler.state_dict(),
                                     rng=capture_rng())
                if dist.is_main:
                    run.adapter = save_checkpoint(run_dir, policy=run.policy, state=state, config=config,
                                                  keep=config.run.keep_checkpoints) / "adapter"
                dist.barrier()
    if dist.is_main:
        plot_curve(log.records(), run_dir / "curve.png")
    adapter = run.adapter or checkpoint_dir(run_dir)  # other ranks: the folder rank 0 writes into
    return TrainResult(run_dir=run_dir, adapter=adapter, metrics=log.records(), policy=run.policy)


def _iterate_or_stop(run: _Run, config: TrainConfig, dist: Distributed, iteration: int,
                     run_dir: Path) -> dict[str, Any]:
    """`_iterate`, with a diverged update located in the run: its folder and the checkpoint left to resume from."""
    try:
        return _iterate(run, config, dist, iteration)
    except DivergedError as error:
        kept = f"the newest checkpoint, {run.adapter.parent}, is the last good one" if run.adapter is not None \
            else "no checkpoint was written"
        raise DivergedError(f"{run_dir}: error: {error}. The run stops: nothing of this iteration is saved, and "
                            f"{kept}") from None


def _iterate(run: _Run, config: TrainConfig, dist: Distributed, iteration: int) -> dict[str, Any]:
    """One iteration: rollouts and scoring, the update, the schedule and the sampler's weights; its metrics."""
    began = time.perf_counter()
    run.policy.model.eval()
    # The KV-cache sampler decodes with the training model: the adapter merged saves two matmuls per adapted layer.
    merged = run.policy.merged() if config.rollout.backend == "transformers" else contextlib.nullcontext()
    with merged:
        batch = collect_batch(run.engine, run.stream, run.scorer, config, dist, iteration)
    corrected = time.perf_counter()
    if config.rollout.backend == "vllm":  # sampled by another engine: the trainer's own old log-probs
        batch.sequences = run.learner.off_policy_correction(batch.sequences, cap=config.loss.importance_cap)
    elif any(s.hinted for s in batch.sequences):  # sampled under the hint: old log-probs on the plain prompt
        plain = [s for s in batch.sequences if not s.hinted]
        hinted = run.learner.off_policy_correction([s for s in batch.sequences if s.hinted],
                                                   cap=config.loss.importance_cap)
        batch.sequences = sorted(plain + hinted, key=lambda s: s.key)
    learned = time.perf_counter()
    batch.metrics["time_old_logprobs"] = learned - corrected  # 0 unless another engine or a hint sampled them
    run.policy.model.train()  # LoRA dropout, if any, acts in the update only
    stats = run.learner.update(batch.sequences, batch.table, seed=config.run.seed, iteration=iteration)
    run.policy.model.eval()
    lr = run.scheduler.get_last_lr()[0]
    with warnings.catch_warnings():  # the schedule runs per iteration, also one whose groups were all constant
        warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
        run.scheduler.step()
    run.sampler.sync(run.policy)
    return {"iteration": iteration + 1, **batch.metrics, "loss": stats.loss, "clip_fraction": stats.clip_fraction,
            "kl": stats.kl, "entropy": stats.entropy, "ratio": stats.ratio, "grad_norm": stats.grad_norm, "lr": lr,
            "optimizer_steps": stats.steps, "approx_kl": stats.approx_kl, "ratio_p50": stats.ratio_p50,
            "ratio_p99": stats.ratio_p99, "ratio_max": stats.ratio_max, "early_stopped": stats.early_stopped,
            "steps": [dataclasses.asdict(step) for step in stats.per_step], "time_forward": stats.time_forward,
            "time_backward": stats.time_backward, "time_optimizer": stats.time_optimizer,
            "time_learn": time.perf_counter() - learned, "time_total": time.perf_counter() - began}


def _setup(config: TrainConfig, run_dir: Path, resume: bool, make_env: EnvironmentFactory | None,
           dist: Distributed, device: str) -> _Run:
    """The model, optimizer, schedule, data stream and rollout engine, restored from the newest checkpoint if any."""
    if config.model.threads:
        torch.set_num_threads(config.model.threads)
    start_from = check_run_dir(run_dir, config, resume)
    _check_device(config, device)
    if "tensorboard" in config.run.report_to:
        import_tensorboardx()  # the install hint before anything loads
    policy = Policy.load(config.model.name, config.lora, device=device, dtype=config.model.dtype, seed=config.run.seed)
    positions = getattr(policy.model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and config.rollout.max_context_tokens > positions:
        raise ConfigError(f"rollout.max_context_tokens = {config.rollout.max_context_tokens}: the model "
                          f"{config.model.name!r} has {positions} positions; use at most {positions}")
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.optim.lr,
                                  betas=(config.optim.betas[0], config.optim.betas[1]),
                                  weight_decay=config.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config))
    stream = TaskStream(config.env.first_seed, config.env.num_seeds, config.run.seed)
    start = 0
    if start_from is not None:
        state = load_checkpoint(start_from, policy)
        optimizer.load_state_dict(state.optimizer)
        scheduler.load_state_dict(state.scheduler)
        restore_rng(state.rng)
        start, stream.position = state.iteration, state.data_position
    # An empty rubric_name (the config's unset one) is the file's only rubric.
    scorer = RubricScorer.from_file(config.advantage.rubric, config.advantage.rubric_name or None, "numba",
                                    lam=config.advantage.lam, gamma=config.advantage.gamma,
                                    step_scale=config.advantage.step_scale) \
        if config.advantage.kind == "trca" else None
    factory = make_env or environment_factory(config.env)
    template = TurnTemplate(policy.tokenizer)
    sampler = make_sampler(config, policy, template, run_dir)
    engine = RolloutEngine(sampler, template, factory, config.rollout, max_turns=config.env.max_turns)
    # Before any rollout: the next task's first prompt fits the context, and the rubric reads its facts.
    opening = engine.opening_state(stream.peek(1)[0])
    if scorer is not None:
        check_rubric_fits(scorer, opening, rubric=config.advantage.rubric)
    return _Run(policy=policy, optimizer=optimizer, scheduler=scheduler, stream=stream, sampler=sampler,
                engine=engine, learner=Learner(policy, optimizer, config, dist), scorer=scorer,
                start=start, adapter=start_from / "adapter" if start_from is not None else None)


def collect_batch(engine: RolloutEngine, stream: TaskStream, scorer: RubricScorer | None, config: TrainConfig,
                  dist: Distributed, iteration: int) -> Batch:
    """Roll out, score and filter groups until the batch is full or the resampling budget is spent."""
    groups, size = config.rollout.groups_per_batch, config.rollout.group_size
    filtering = config.advantage.filter_constant_groups
    table: list[SequenceInfo] = []
    accepted: set[int] = set()
    sequences: list[LearnSequence] = []
    first: list[dict[str, Any]] = []  # the first batch's episodes: an unbiased sample of the policy
    sampled = attempts = 0
    signal = False  # some group of some batch had an advantage that is not 0
    times = {"time_rollout": 0.0, "time_score": 0.0}
    for attempt in range(1 + config.advantage.max_resample_batches):
        attempts += 1
        seeds = stream.take(groups)
        tasks = [GroupTask(group=attempt * groups + i, seed=seed) for i, seed in enumerate(seeds) if dist.owns(i)]
        clock = time.perf_counter()
        episodes = engine.run(tasks, group_size=size, seed=config.run.seed, iteration=iteration) if tasks else []
        times["time_rollout"] += time.perf_counter() - clock
        clock = time.perf_counter()
        advantages = episode_token_advantages(episodes, kind=config.advantage.kind, scale=config.advantage.scale,
                                              scorer=scorer, oracle=config.advantage.oracle) if episodes else []
        constant = constant_groups(episodes, advantages)
        times["time_score"] += time.perf_counter() - clock
        offers: dict[int, list[tuple[int, int, int]]] = {}  # group -> (member, length, loss units)
        for episode in episodes:
            if not (filtering and episode.group in constant):
                offers.setdefault(episode.group, []).append((episode.member, *_units(episode, config.loss_level)))
        gathered = dist.gather(([_summary(e, e.group in constant) for e in episodes], offers))
        summaries = [s for rank_summaries, _ in gathered for s in rank_summaries]
        sampled += sum(s["sampled_tokens"] for s in summaries)
        signal = signal or not all(s["constant"] for s in summaries)
        if attempt == 0:
            first = summaries
        # Groups in group order whoever holds them, so every rank accepts the same ones.
        for group, rank, members in sorted((g, r, m) for r, (_, o) in enumerate(gathered) for g, m in o.items()):
            if len(accepted) == groups:
                break
            accepted.add(group)
            table.extend(SequenceInfo(key=(group, m), length=n, loss_tokens=t, rank=rank) for m, n, t in members)
            if rank == dist.rank:
                sequences.extend(learn_sequence(e, a) for e, a in zip(episodes, advantages) if e.group == group)
        if len(accepted) >= groups or not filtering:
            break
    metrics = _rollout_metrics(first, groups_trained=len(accepted), resample_batches=attempts - 1)
    metrics.update(times)
    metrics["sampled_tokens"] = sampled
    metrics["no_signal"] = not signal
    metrics["tokens_per_s"] = sampled / max(times["time_rollout"], 1e-9)
    return Batch(sequences=sequences, table=table, metrics=metrics)


def _summary(episode: EpisodeRollout, constant: bool) -> dict[str, Any]:
    return {"group": episode.group, "reward": episode.reward, "success": episode.success, "turns": episode.turns,
            "truncated": episode.truncated, "constant": constant, "sampled_tokens": int(episode.sampled.sum()),
            "hinted": episode.hinted}


def _rollout_metrics(summaries: Sequence[dict[str, Any]], *, groups_trained: int,
                     resample_batches: int) -> dict[str, float]:
    rewards = np.array([s["reward"] for s in summaries], dtype=np.float64)
    groups = {s["group"]: s["constant"] for s in summaries}
    return {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "success_rate": float(np.mean([bool(s["success"]) for s in summaries])),
            "constant_fraction": float(np.mean(list(groups.values()))),
            "turns_mean": float(np.mean([s["turns"] for s in summaries])),
            "truncated_fraction": float(np.mean([s["truncated"] for s in summaries])),
            "hinted_fraction": float(np.mean([s["hinted"] for s in summaries])),
            "groups_trained": groups_trained, "resample_batches": resample_batches}


def _units(episode: EpisodeRollout, level: str) -> tuple[int, int]:
    """An episode's forward length and loss units at `level`: its tokens and loss tokens, or its tree and turns."""
    if level == "command":
        return tree_length(len(episode.token_ids), episode.choice_turns), len(episode.choice_turns)
    return len(episode.token_ids), int(episode.loss_mask.sum())


def learn_sequence(episode: EpisodeRollout, advantages: np.ndarray) -> LearnSequence:
    """What the learner needs of an episode; a chosen command's advantage is its first token's (its step's)."""
    return LearnSequence(key=(episode.group, episode.member), token_ids=episode.token_ids,
                         loss_mask=episode.loss_mask, advantages=advantages, old_logprobs=episode.sampler_logprobs,
                         choice_turns=episode.choice_turns, hinted=episode.hinted,
                         choice_advantages=tuple(float(advantages[turn.start]) for turn in episode.choice_turns))


def make_sampler(config: TrainConfig, policy: Policy, template: TurnTemplate, run_dir: Path) -> Any:
    """The rollout backend: the KV-cache sampler over the training model itself, or vLLM (GPU)."""
    if config.rollout.backend == "vllm":
        return VLLMSampler.create(policy, template, run_dir / "vllm_adapters", model=config.model.name,
                                  lora_rank=config.lora.rank, dtype=config.model.dtype, seed=config.run.seed,
                                  temperature=config.rollout.temperature,
                                  max_context_tokens=config.rollout.max_context_tokens,
                                  gpu_memory=config.rollout.vllm_gpu_memory, eager=config.rollout.vllm_eager)
    pad = policy.tokenizer.pad_token_id
    return KVCacheSampler(policy.model, temperature=config.rollout.temperature,
                          end_of_turn_ids=template.end_of_turn_ids, pad_id=int(pad if pad is not None else 0),
                          choice_score=config.rollout.choice_score)


def _lr_factor(config: TrainConfig) -> Callable[[int], float]:
    """The learning rate's factor at iteration i: linear warmup, then constant, linear or cosine decay to 0."""
    warmup, total, schedule = config.optim.warmup_iterations, config.run.iterations, config.optim.schedule

    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = (i - warmup) / max(total - warmup, 1)
        return max(0.0, 1.0 - progress) if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def _check_device(config: TrainConfig, device: str) -> None:
    require_device(device, "model.device")
    if config.rollout.backend == "vllm":
        import_vllm()  # the install hint (an LLMError) before anything loads
