"""The GRPO trainer: its config (`config`, `config_io`), what it trains on (`environments`), the loop (`train`),
credit (`credit`: GRPO or TRCA), the objective (`loss`), one update (`learner`), checkpoints, data parallelism
(`distributed`) and what a run reports (`report`)."""
