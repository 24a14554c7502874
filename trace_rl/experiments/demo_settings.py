"""What `tracec demo` is asked, without torch or TextWorld: the held-out seeds, the budget, the shipped examples.

The command line builds its `--help` from `DemoBudget`'s defaults and checks `--train-games` against
`EVAL_SEED_BASE` before the demo (`tracec.trace_rl.experiments.demo`, which imports the trainer) is imported.
`shipped_examples()` is the folder of the rubrics installed with the package, which the demo and the learning
curves score with.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# Fixed before any tuning and never trained on: training games are seeds 0, 1, ..., held-out ones 100000, 100001, ...
EVAL_SEED_BASE = 100_000


@dataclass(frozen=True, kw_only=True)
class DemoBudget:
    iterations: int = 12  # a method; each iteration samples groups x group_size episodes
    eval_every: int = 4
    groups: int = 8
    group_size: int = 8
    lr: float = 2e-3  # with clip_eps 0.28, target_kl 0.05: ratio p99 within 1 + 3 eps (bench/RESULTS.md "learning")
    clip_eps: float = 0.28
    target_kl: float = 0.05
    hidden: int = 128  # the small policy's width (64 does not pass the learnability gate: docs/learning.md)
    eval_episodes: int = 4  # a held-out seed
    trace_iterations: int = 4  # each capability adapter's (demo_trace); 0 skips the TRACE section
    trace_pool_games: int = 64  # the short quests the capability environments are drawn from
    # SmolLM2 showed 0 -> 0 on 4 episodes after 151 s: its minutes went to TRACE; 1 brings the section back
    smol_iterations: int = 0  # SmolLM2; 0 skips it (each iteration: ~2 CPU-minutes here)
    smol_groups: int = 1
    smol_group_size: int = 4
    smol_eval_seeds: int = 4
    smol_lr: float = 1e-4
    parallel: bool = True  # the two methods in two processes at once


def shipped_examples() -> Path:
    """The folder of the examples installed with the package (`examples/` of the checkout, in an editable install)."""
    root = resources.files("tracec.examples")
    if not isinstance(root, Path):
        raise TypeError(f"the examples are not files on disk ({root!r}); install tracec unzipped")
    return root
