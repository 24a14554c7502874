"""Which learning rate moves SmolLM2-135M + LoRA r16 in a few GRPO iterations: a short run per rate, side by side.

    python bench/lr_sweep.py [--iterations 6] [--rates 1e-5 1e-4 1e-3]

The task is the GRPO benchmark's single-turn one (`bench/grpo_step.py`: 8 everyday questions, reward = the share of
the letters a to m in the reply), which a policy can move on quickly; every question in every batch (8 groups of
8), 24 new tokens, a tiny KL weight (1e-3) so that the KL to the base model is measured. Each rate's run is in
this process, one after the other (this is about learning, not speed). Writes the "learning rate" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--groups", type=int, default=8, help="groups a batch (8: every prompt, every iteration)")
    parser.add_argument("--rates", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.train import train

    rows = []
    for lr in args.rates:
        config = load_config(None, [
            "env.kind=python", "env.python.factory=bench.grpo_step:question_env", "env.num_seeds=8",
            "env.max_turns=1", "rollout.group_size=8", f"rollout.groups_per_batch={args.groups}",
            "rollout.max_new_tokens=24",
            "rollout.max_context_tokens=512", "rollout.loss_tokens=turn", f"optim.lr={lr!r}", "loss.kl_beta=1e-3",
            f"iterations={args.iterations}", "checkpoint_every=1000", f"model.threads={args.threads}"])
        def progress(m: dict[str, Any], lr: float = lr) -> None:
            print(lr, m["iteration"], m["reward_mean"], file=sys.stderr)

        with tempfile.TemporaryDirectory() as out:
            metrics = train(config, out=out, on_iteration=progress).metrics
        first = sum(m["reward_mean"] for m in metrics[:2]) / 2
        last = sum(m["reward_mean"] for m in metrics[-2:]) / 2
        rows.append([f"{lr:g}", f"{first:.3f}", f"{last:.3f}", f"{last - first:+.3f}", f"{metrics[-1]['kl']:.4f}",
                     f"{metrics[-1]['clip_fraction']:.3f}", " ".join(f"{m['reward_mean']:.3f}" for m in metrics)])
        print(rows[-1], file=sys.stderr)
    body = (f"SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), GRPO, {args.iterations} iterations of {args.groups} "
            "groups x 8 on "
            "the single-turn letters task of `bench/grpo_step.py` (reward: share of a-m in the reply), 2 "
            "mini-batches, clip 0.28, KL weight 1e-3 (measured, hardly felt). A learning measurement, not a timing "
            "one: one run per rate, in-process, one training seed; each figure is the mean reward of the iterations "
            f"named; torch threads: {args.threads or 'torch default'}.\n\n"
            + markdown_table(["lr", "reward, iterations 1-2", "reward, last 2", "change", "KL at the end",
                              "clip fraction at the end", "reward per iteration"], rows))
    record("learning rate", body, "python bench/lr_sweep.py")


if __name__ == "__main__":
    main()
