"""A LoRA adapter under training, set up once for the GRPO trainer (`train`) and SFT-gold (`trace.gold_sft`) alike.

    policy = load_policy(config, device)                     # the base model and a fresh adapter seeded by run.seed
    training = start_training(policy, config, lr=config.optim.lr, schedule=lr_factor(config.optim, iterations),
                              resume_from=latest_checkpoint(run_dir))   # None: a fresh run
    log = training.metrics_log(run_dir / "metrics.jsonl")    # without the iterations after the resumed checkpoint
    training.save(run_dir, config, iteration=i + 1, data_position=stream.position, keep=2)

What the two share: the model loaded as `[model]` and `[lora]` say; AdamW on the adapter with `[optim]`'s betas and
weight decay (the learning rate is each trainer's own); an optional per-iteration schedule (`lr_factor`: linear
warmup, then `optim.schedule` resolved here, once, into its decay); resuming from a checkpoint (the adapter, the
optimizer's and the schedule's states, the RNG states, `checkpoint`); the metrics log kept through the iteration
resumed from; checkpoints with the same state. Left out: what each trainer does between checkpoints, and where its
run folder comes from (`run_folder.check_run_dir`, `gold_sft`'s marker).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tracec.trace_rl.grpo.checkpoint import TrainerState, capture_rng, load_checkpoint, restore_rng, save_checkpoint
from tracec.trace_rl.grpo.config import OptimSection, TrainConfig
from tracec.trace_rl.grpo.report import MetricsLog
from tracec.trace_rl.policy.model import Policy

# The learning rate's decay after warmup, by `optim.schedule`, as a function of the progress through it, in [0, 1].
DECAYS: dict[str, Callable[[float], float]] = {
    "constant": lambda progress: 1.0,
    "linear": lambda progress: max(0.0, 1.0 - progress),
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
}


def load_policy(config: TrainConfig, device: str) -> Policy:
    """The model of `[model]` with a fresh `[lora]` adapter initialised from `run.seed`."""
    if config.model.threads:
        torch.set_num_threads(config.model.threads)
    return Policy.load(config.model.name, config.lora, device=device, dtype=config.model.dtype, seed=config.run.seed)


def lr_factor(optim: OptimSection, iterations: int) -> Callable[[int], float]:
    """The learning rate's factor at iteration i: linear warmup, then constant, linear or cosine decay to 0."""
    warmup, decay = optim.warmup_iterations, DECAYS[optim.schedule]

    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / (warmup + 1)
        return decay((i - warmup) / max(iterations - warmup, 1))

    return factor


@dataclass
class Training:
    """The policy, its optimizer and schedule, and the checkpoint they were resumed from (None: a fresh start)."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR | None
    resumed: TrainerState | None
    checkpoint: Path | None  # the folder of the newest checkpoint: the resumed one, then each one saved

    @property
    def start(self) -> int:
        """Iterations already done."""
        return self.resumed.iteration if self.resumed is not None else 0

    def metrics_log(self, path: Path, *, enabled: bool = True) -> MetricsLog:
        """The run's metrics file, its lines after the iteration resumed from dropped (they are run again)."""
        return MetricsLog(path, keep_through=self.start, enabled=enabled)

    def save(self, run_dir: Path, config: TrainConfig, *, iteration: int, data_position: int, keep: int) -> Path:
        """The checkpoint of `iteration` (the newest `keep` kept; 0: all); its adapter folder."""
        state = TrainerState(iteration=iteration, data_position=data_position, optimizer=self.optimizer.state_dict(),
                             scheduler=self.scheduler.state_dict() if self.scheduler is not None else {},
                             rng=capture_rng())
        self.checkpoint = save_checkpoint(run_dir, policy=self.policy, state=state, config=config, keep=keep)
        return self.checkpoint / "adapter"


def start_training(policy: Policy, config: TrainConfig, *, lr: float, schedule: Callable[[int], float] | None,
                   resume_from: Path | None) -> Training:
    """AdamW on the adapter at `lr` (and the per-iteration `schedule`, if any), restored from the checkpoint in
    `resume_from` with the RNG states it saved."""
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, betas=(config.optim.betas[0],
                                                                                 config.optim.betas[1]),
                                  weight_decay=config.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) if schedule is not None else None
    resumed = None
    if resume_from is not None:
        resumed = load_checkpoint(resume_from, policy)
        optimizer.load_state_dict(resumed.optimizer)
        if scheduler is not None:
            scheduler.load_state_dict(resumed.scheduler)
        restore_rng(resumed.rng)
    return Training(policy=policy, optimizer=optimizer, scheduler=scheduler, resumed=resumed, checkpoint=resume_from)
