"""SmolLM2-135M-Instruct + LoRA on the TextWorld family: held-out success before and after training, with intervals.

    python bench/learning_smollm2.py [--workdir out/learning-smollm2] [--method trca] [--iterations 10] [--record]
    python bench/learning_smollm2.py --device cuda --iterations 16 --groups 8 --section "learning, SmolLM2 (GPU)"

Why this task: the TextWorld family in the admissible mode, the commands chosen (and the loss on log pi(c|s)) as for
the small policy, is the one shipped environment whose held-out games and sparse reward make "learned something"
measurable on >= 64 held-out episodes; a pretrained model already writes commands, so the comparison is with its own
start, not with a random policy. The held-out games are the experiment's (seeds 100000 ..), never trained on; every
checkpoint meets the same episodes (one fixed stream), so the gain is paired over games: the interval is a bootstrap
over games of after minus before (one seed: the spread over training seeds is not in it, and the section says so).
Left out: vLLM (the admissible mode scores commands with the transformers sampler).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record

SMOLLM2 = "smollm2-135m-instruct"
EVAL_SEED_BASE = 100_000


def main() -> None:
    args = _arguments()
    from tracec.trace_rl.envs.textworld.family import TaskFamily
    from tracec.trace_rl.experiments.learning_curve import RunSpec, learning_curve, prepare_setup
    from tracec.trace_rl.experiments.learning_stats import paired_difference, success_interval
    from tracec.trace_rl.policy.lora import LoraSection

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    family = TaskFamily(train_seeds=tuple(range(args.train_games)),
                        eval_seeds=tuple(range(EVAL_SEED_BASE, EVAL_SEED_BASE + args.eval_games)))
    setup = prepare_setup(args.workdir, family)
    spec = RunSpec(method=args.method, model=SMOLLM2, rubric=setup.rubric, lora=LoraSection(rank=16, alpha=32.0),
                   iterations=args.iterations, eval_every=args.iterations, groups_per_batch=args.groups,
                   group_size=args.group_size, lr=args.lr, clip_eps=0.28, target_kl=args.target_kl,
                   eval_episodes=args.eval_episodes, eval_greedy=True, threads=args.threads, device=args.device,
                   seed=args.seed)
    name = args.method if args.seed == 0 else f"{args.method}-s{args.seed}"
    out = args.workdir / f"run-{name}"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    began = time.perf_counter()
    curve = learning_curve(setup, spec, out)
    before, after = curve.points[0], curve.points[-1]
    wins = [np.asarray(p.wins, dtype=float)[None] for p in (before, after)]
    gain = paired_difference(*wins)
    summary = {"settings": vars(args) | {"workdir": str(args.workdir)}, "seconds": time.perf_counter() - began,
               "before": success_interval(wins[0]).level(), "after": success_interval(wins[1]).level(),
               "gain": str(gain), "greedy": [before.greedy, after.greedy], "points": [asdict(p) for p in curve.points],
               "train": [{k: m.get(k) for k in ("success_rate", "ratio_p99", "approx_kl", "optimizer_steps")}
                         for m in curve.train_metrics]}
    (args.workdir / f"summary-{name}.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    text = _report(summary, args)
    print(text)
    if args.record:
        command = "python bench/learning_smollm2.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("record", "workdir", "section"))
        record(args.section, text, command + " --record")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/learning-smollm2"))
    parser.add_argument("--method", default="trca", choices=("grpo", "trca"))
    parser.add_argument("--train-games", type=int, default=64)
    parser.add_argument("--eval-games", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=2, help="sampled episodes a held-out game")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--target-kl", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0, help="the training seed (the held-out episodes stay fixed)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default 0: torch's own, all cores)")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--section", default="learning, SmolLM2")
    return parser.parse_args()


def _report(summary: dict, args: argparse.Namespace) -> str:
    rows = [[f"{args.method}, seed {args.seed}", args.iterations * args.groups * args.group_size, summary["before"],
             summary["after"],
             summary["gain"], f"{summary['greedy'][0]:.3f} -> {summary['greedy'][1]:.3f}",
             " ".join(f"{m['success_rate']:.2f}" for m in summary["train"]), f"{summary['seconds'] / 60:.0f}"]]
    return (f"SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), the TextWorld family in the admissible mode, "
            f"{args.iterations} iterations of {args.groups} x {args.group_size} episodes, lr {args.lr:g}, "
            f"training seed {args.seed}, "
            f"{args.device}; held-out: {args.eval_games} games x {args.eval_episodes} sampled episodes (and one greedy "
            "a game); the gain's interval is a paired bootstrap over the held-out games (one training seed).\n\n"
            + markdown_table(["method", "training episodes", "held-out before [95% CI]", "after [95% CI]",
                              "gain (paired)", "greedy", "training success by iteration", "minutes"], rows))


if __name__ == "__main__":
    main()
