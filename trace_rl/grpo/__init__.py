"""The GRPO trainer: its config (`config`, `config_io`), the order of its task seeds (`task_stream`; the environments
are `trace_rl.envs.registry`'s), the loop (`train`), its set-up shared with SFT-gold (`training`: model,
optimizer, schedule, resume, checkpoints), the sampler a config names (`rollout_backend`), credit (`credit`: GRPO,
TRCA or the oracle), the objective (`loss`) over its units (`loss_units`), one update (`learner`), checkpoints, data
parallelism (`distributed`) and what a run reports (`report`)."""
