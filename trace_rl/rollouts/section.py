"""How a run samples its episodes: the `[rollout]` section of a run's config, checked when made.

The rollout engine, the samplers and the learner (which must score tokens as they were sampled) read it as it is.
Kept apart from `engine.py` so that reading a config imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracec.config_io import choice, require


@dataclass(frozen=True, kw_only=True)
class RolloutSection:
    backend: str = "auto"  # auto | transformers | vllm (GPU: the `gpu` extra; CPU: `make vllm-venv`); auto: vllm on
    #   a CUDA device where it is installed, else transformers (`grpo.rollout_backend.resolved_backend` says why)
    group_size: int = 16  # K episodes of one task instance
    groups_per_batch: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 128  # per agent turn
    max_context_tokens: int = 2048  # an episode ends (truncated) when its next turn would not fit
    loss_tokens: str = "action"  # action: only the action of each turn | turn: every sampled token (as TRL)
    action_mode: str = "generate"  # generate: the policy writes its turn | admissible: it chooses one of the
    #   environment's admissible commands (TextWorld lists them), scored under the policy and sampled
    choice_score: str = "mean"  # admissible: a command's score is its tokens' mean log-prob (mean) or their sum
    hint_ratio: tuple[float, ...] = (0.0, 0.0)  # [low, high]: per group, round(r * group_size) members, r uniform
    #   in [low, high], see the environment's `hint()` (expert guidance) in their first prompt; the update sees the
    #   plain prompt (TRACE: [0.25, 0.5]; [0, 0] is off)
    vllm_gpu_memory: float = 0.3  # vllm: the fraction of GPU memory it may take (on the CPU: of RAM, for its KV cache)
    vllm_eager: bool = False  # vllm: skip CUDA graph capture (starts faster, decodes slower)

    def __post_init__(self) -> None:
        choice("backend", self.backend, ("auto", "transformers", "vllm"))
        require(self.group_size >= 2, "group_size", self.group_size,
                "a group needs at least 2 episodes (a group of one has no baseline); try 16")
        require(self.groups_per_batch >= 1, "groups_per_batch", self.groups_per_batch, "an integer >= 1; try 4")
        # Log-probs are logits / T: below ~1e-30 that overflows float32 (every loss NaN), and long before, at
        # T < 0.01, sampling is greedy in all but name while the ratio's numeric noise grows as 1/T.
        require(0.01 <= self.temperature <= 10, "temperature", self.temperature,
                "a number in [0.01, 10]; training samples the policy itself, so not 0 or near it (greedy); try 1.0")
        require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "an integer >= 1; try 128")
        require(self.max_context_tokens > self.max_new_tokens, "max_context_tokens", self.max_context_tokens,
                f"must exceed rollout.max_new_tokens ({self.max_new_tokens}) to leave room for a prompt")
        choice("loss_tokens", self.loss_tokens, ("action", "turn"))
        choice("action_mode", self.action_mode, ("generate", "admissible"))
        choice("choice_score", self.choice_score, ("mean", "sum"))
        require(len(self.hint_ratio) == 2 and 0 <= self.hint_ratio[0] <= self.hint_ratio[1] <= 1, "hint_ratio",
                self.hint_ratio, "[low, high] with 0 <= low <= high <= 1; try [0.25, 0.5] (TRACE) or [0, 0] (off)")
        require(self.hint_ratio[1] == 0 or self.action_mode == "generate", "hint_ratio", self.hint_ratio,
                "hints are for written turns (the command level scores choices under the sampled context); use "
                "rollout.action_mode = \"generate\" or hint_ratio = [0, 0]")
        require(0 < self.vllm_gpu_memory <= 1, "vllm_gpu_memory", self.vllm_gpu_memory, "a fraction in (0, 1]")
        require(self.backend != "vllm" or self.action_mode != "admissible", "action_mode", self.action_mode,
                "the admissible-command mode scores commands with the transformers sampler; use rollout.backend = "
                "\"transformers\" or action_mode = \"generate\"")
