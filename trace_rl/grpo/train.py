"""The GRPO trainer: one LoRA adapter on one environment, its credit GRPO's, TRCA's, GiGPO's, shaped GRPO's or the
oracle's.

    result = train(load_config("examples/train/tool_calling_trca.toml"))  # or: tracec train CONFIG.toml
    torchrun --nproc_per_node 2 -m tracec.cli train CONFIG.toml     # the same, data-parallel

An iteration reads from three files: this one (the loop), `learner` (one update) and `loss` (its objective). Every
choice a config makes among ways of doing a thing is resolved into an object once, by `set_up`, never tested in the
loop: the sampler (`rollout_backend.make_sampler`; it says itself whether it decodes with the training weights and
whether its log-probs need recomputing, `rollouts.sampler`), the credit (`credit.credit_for`: one callable per
`advantage.kind`), the loss units (`loss_units.loss_units_for`: a token, or a chosen command), the schedule
(`training.lr_factor`). The model, optimizer, schedule, resume and checkpoints are `training`'s, shared with SFT-gold.

One iteration:
1. Rollouts: `groups_per_batch` task seeds from the run's stream; K = `group_size` episodes of each (a group shares
   the seed), every episode of the iteration decoded in one batch, multi-turn, token-in/token-out
   (`rollouts.engine`), the adapter merged into the base weights meanwhile when the sampler runs the training model
   itself. Ranks split the groups.
2. Credit: each loss token's advantage, from the run's credit: the episode's group-normalised reward (GRPO), its
   step's A = A_E + A_S from the compiled rubric (TRCA), A_E plus the anchor-state step advantage (GiGPO), the
   group-normalised rubric return (shaped GRPO), or its step's plan credit (the oracle).
3. Filtering: groups whose advantages are all zero teach nothing; they are dropped, and up to
   `max_resample_batches` further batches are sampled to refill the batch (DAPO's dynamic sampling, bounded).
   Every rank accepts the same groups, measured in the loss units (`LossUnits.size`).
4. Old log-probs: the sampler's, unless it says they are not the training model's (vLLM, a script): then the
   learner recomputes them and weighs each sequence by its importance weight; a hinted episode's are recomputed on
   its plain prompt.
5. Learning: epochs x mini-batches of AdamW steps on the clipped surrogate over the loss units (`learner`, `loss`),
   optional k3 KL to the base model (the adapter disabled), an optional entropy bonus and KL target; each step's
   trust-region diagnostics (ratio quantiles, KL to the sampler, clip fraction, gradient norm) go to the metrics.
   Then the schedule steps and the sampler gets the new weights (`sync`: vLLM reloads them, others have them).
6. Bookkeeping: metrics to `metrics.jsonl` and the console (and TensorBoard, `run.report_to`), a checkpoint every
   `checkpoint_every` iterations. A non-finite loss, gradient or weight stops the run before anything of its
   iteration is saved (`divergence.DivergedError`): the newest checkpoint stays the last good one.

What this leaves out of GRPO as papers describe it: a separate frozen reference model (the base is the adapter
switched off), a value function or any critic, reward models (rewards are the environment's and the rubric's),
per-token advantages within a step, the token-level loss's entropy bonus, and asynchronous (off-policy) rollouts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tracec.trace_rl.envs.protocol import EnvironmentFactory
from tracec.trace_rl.envs.registry import environment_factory
from tracec.trace_rl.grpo.config import ConfigError, TrainConfig
from tracec.trace_rl.grpo.credit import Credit, constant_groups, credit_for
from tracec.trace_rl.grpo.distributed import Distributed, process_group
from tracec.trace_rl.grpo.divergence import DivergedError
from tracec.trace_rl.grpo.learner import Learner, LearnSequence, SequenceInfo
from tracec.trace_rl.grpo.loss_units import loss_units_for
from tracec.trace_rl.grpo.report import check_reporters, open_reporters, plot_curve
from tracec.trace_rl.grpo.rollout_backend import make_sampler as backend_sampler
from tracec.trace_rl.grpo.rollout_backend import require_backend
from tracec.trace_rl.grpo.run_folder import check_run_dir, checkpoint_dir
from tracec.trace_rl.grpo.task_stream import TaskStream
from tracec.trace_rl.grpo.training import Training, load_policy, lr_factor, start_training
from tracec.trace_rl.policy.catalog import require_device
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout, GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.sampler import TurnSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate

SamplerFactory = Callable[[Policy, TurnTemplate], TurnSampler]  # a sampler of one's own (a script's), not a backend's


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
          make_env: EnvironmentFactory | None = None, make_sampler: SamplerFactory | None = None,
          on_iteration: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Run (or, with `resume`, continue) the training `config` describes; `make_env` overrides `[env]`,
    `make_sampler` `rollout.backend`."""
    with process_group(config.model.device) as (dist, device):
        run_dir = Path(out or config.run.out)
        # The checkpoints' copy of the config names the folder the run writes to, which --out may have chosen.
        config = config.replace(run=dataclasses.replace(config.run, out=str(run_dir.resolve())))
        # The Run lives in `_train`'s frame only: its Learner's DDP wrapper holds the group, so it must be gone
        # (returned, or its frames cleared) by the time the block ends the group; a local here would outlive it.
        return _train(set_up(config, run_dir, resume=resume, make_env=make_env, make_sampler=make_sampler,
                             dist=dist, device=device), config, run_dir, on_iteration, dist)


@dataclass
class Run:
    """Everything one training run holds between iterations, every mode of its config resolved (`set_up`)."""

    training: Training  # the policy, its optimizer and schedule, the newest checkpoint
    stream: TaskStream
    sampler: TurnSampler
    engine: RolloutEngine
    credit: Credit
    learner: Learner  # with the run's loss units

    @property
    def policy(self) -> Policy:
        return self.training.policy


def _train(run: Run, config: TrainConfig, run_dir: Path, on_iteration: Callable[[dict[str, Any]], None] | None,
           dist: Distributed) -> TrainResult:
    if dist.is_main:
        checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)  # the folder is a run's now (`run_started`)
    log = run.training.metrics_log(run_dir / "metrics.jsonl", enabled=dist.is_main)
    with contextlib.ExitStack() as stack:
        boards = [stack.enter_context(contextlib.closing(board)) for board in
                  open_reporters(config.run.report_to, run_dir, first_iteration=run.training.start + 1)] \
            if dist.is_main else []
        for iteration in range(run.training.start, config.run.iterations):
            metrics = _iterate_or_stop(run, config, dist, iteration, run_dir)
            log.append(metrics)
            for board in boards:
                board.append(metrics)
            if on_iteration is not None and dist.is_main:
                on_iteration(metrics)
            if (iteration + 1) % config.run.checkpoint_every == 0 or iteration + 1 == config.run.iterations:
                if dist.is_main:
                    run.training.save(run_dir, config, iteration=iteration + 1, data_position=run.stream.position,
                                      keep=config.run.keep_checkpoints)
                dist.barrier()
    if dist.is_main:
        plot_curve(log.records(), run_dir / "curve.png")
    newest = run.training.checkpoint
    adapter = newest / "adapter" if newest is not None else checkpoint_dir(run_dir)  # other ranks: rank 0's folder
    return TrainResult(run_dir=run_dir, adapter=adapter, metrics=log.records(), policy=run.policy)


def _iterate_or_stop(run: Run, config: TrainConfig, dist: Distributed, iteration: int,
                     run_dir: Path) -> dict[str, Any]:
    """`iterate`, with a diverged update located in the run: its folder and the checkpoint left to resume from."""
    try:
        return iterate(run, config, dist, iteration)
    except DivergedError as error:
        newest = run.training.checkpoint
        kept = f"the newest checkpoint, {newest}, is the last good one" if newest is not None \
            else "no checkpoint was written"
        raise DivergedError(f"{run_dir}: error: {error}. The run stops: nothing of this iteration is saved, and "
                            f"{kept}") from None


def iterate(run: Run, config: TrainConfig, dist: Distributed, iteration: int) -> dict[str, Any]:
    """One iteration: rollouts and credit, the old log-probs, the update, the schedule and the sampler's weights;
    its metrics."""
    began = time.perf_counter()
    policy = run.policy
    policy.model.eval()
    # Decoding with the training model: the adapter merged saves two matmuls per adapted layer.
    with policy.merged() if run.sampler.decodes_with_training_weights else contextlib.nullcontext():
        batch = collect_batch(run, config, dist, iteration)
    corrected = time.perf_counter()
    if run.sampler.recomputes_old_logprobs:  # not the training model's: the trainer's own old log-probs
        batch.sequences = run.learner.off_policy_correction(batch.sequences, cap=config.loss.importance_cap)
    elif any(s.hinted for s in batch.sequences):  # sampled under the hint: old log-probs on the plain prompt
        plain = [s for s in batch.sequences if not s.hinted]
        hinted = run.learner.off_policy_correction([s for s in batch.sequences if s.hinted],
                                                   cap=config.loss.importance_cap)
        batch.sequences = sorted(plain + hinted, key=lambda s: s.key)
    learned = time.perf_counter()
    batch.metrics["time_old_logprobs"] = learned - corrected  # 0 unless they were recomputed
    policy.model.train()  # LoRA dropout, if any, acts in the update only
    stats = run.learner.update(batch.sequences, batch.table, seed=config.run.seed, iteration=iteration)
    policy.model.eval()
    scheduler = run.training.scheduler
    assert scheduler is not None  # set_up gives the trainer its schedule
    lr = scheduler.get_last_lr()[0]
    with warnings.catch_warnings():  # the schedule runs per iteration, also one whose groups were all constant
        warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
        scheduler.step()
    run.sampler.sync(policy)
    return {"iteration": iteration + 1, **batch.metrics, "loss": stats.loss, "clip_fraction": stats.clip_fraction,
            "kl": stats.kl, "entropy": stats.entropy, "ratio": stats.ratio, "grad_norm": stats.grad_norm, "lr": lr,
            "optimizer_steps": stats.steps, "approx_kl": stats.approx_kl, "ratio_p50": stats.ratio_p50,
            "ratio_p99": stats.ratio_p99, "ratio_max": stats.ratio_max, "early_stopped": stats.early_stopped,
            "steps": [dataclasses.asdict(step) for step in stats.per_step], "time_forward": stats.time_forward,
            "time_backward": stats.time_backward, "time_optimizer": stats.time_optimizer,
            "time_learn": time.perf_counter() - learned, "time_total": time.perf_counter() - began}


def collect_batch(run: Run, config: TrainConfig, dist: Distributed, iteration: int) -> Batch:
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
        seeds = run.stream.take(groups)
        tasks = [GroupTask(group=attempt * groups + i, seed=seed) for i, seed in enumerate(seeds) if dist.owns(i)]
        clock = time.perf_counter()
        episodes = run.engine.run(tasks, group_size=size, seed=config.run.seed, iteration=iteration) if tasks else []
        times["time_rollout"] += time.perf_counter() - clock
        clock = time.perf_counter()
        advantages = run.credit(episodes) if episodes else []
        constant = constant_groups(episodes, advantages)
        times["time_score"] += time.perf_counter() - clock
        offers: dict[int, list[tuple[int, int, int]]] = {}  # group -> (member, length, loss units)
        for episode in episodes:
            if not (filtering and episode.group in constant):
                offers.setdefault(episode.group, []).append((episode.member, *run.learner.units.size(episode)))
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


def learn_sequence(episode: EpisodeRollout, advantages: np.ndarray) -> LearnSequence:
    """What the learner needs of an episode; a chosen command's advantage is its first token's (its step's)."""
    return LearnSequence(key=(episode.group, episode.member), token_ids=episode.token_ids,
                         loss_mask=episode.loss_mask, advantages=advantages, old_logprobs=episode.sampler_logprobs,
                         choice_turns=episode.choice_turns, hinted=episode.hinted,
                         choice_advantages=tuple(float(advantages[turn.start]) for turn in episode.choice_turns))


def set_up(config: TrainConfig, run_dir: Path, *, resume: bool, make_env: EnvironmentFactory | None,
           make_sampler: SamplerFactory | None, dist: Distributed, device: str) -> Run:
    """The run, restored from the newest checkpoint if any: every input checked before the model loads, every mode
    of the config resolved into its object."""
    start_from = check_run_dir(run_dir, config, resume)
    require_device(device, "model.device")
    require_backend(config)
    check_reporters(config.run.report_to)
    policy = load_policy(config, device)
    positions = getattr(policy.model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and config.rollout.max_context_tokens > positions:
        raise ConfigError(f"rollout.max_context_tokens = {config.rollout.max_context_tokens}: the model "
                          f"{config.model.name!r} has {positions} positions; use at most {positions}")
    training = start_training(policy, config, lr=config.optim.lr, schedule=lr_factor(config.optim,
                                                                                      config.run.iterations),
                              resume_from=start_from)
    stream = TaskStream(config.env.first_seed, config.env.num_seeds, config.run.seed,
                        position=training.resumed.data_position if training.resumed is not None else 0)
    template = TurnTemplate(policy.tokenizer)
    sampler = make_sampler(policy, template) if make_sampler is not None else \
        backend_sampler(config, policy, template, run_dir)
    engine = RolloutEngine(sampler, template, make_env or environment_factory(config.env), config.rollout,
                           max_turns=config.env.max_turns)
    # Before any rollout: the next task's first prompt fits the context, and the credit can read its facts.
    credit = credit_for(config.advantage, engine.opening_state(stream.peek(1)[0]))
    learner = Learner(policy, training.optimizer, config, dist, loss_units_for(config))
    return Run(training=training, stream=stream, sampler=sampler, engine=engine, credit=credit, learner=learner)
