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
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # last: see bench/gpu_check.py

from bench.results import markdown_table, record

if TYPE_CHECKING:
    from tracec.trace_rl.envs.textworld.family import TaskFamily
    from tracec.trace_rl.experiments.learning_curve import RunSpec, Setup

SMOLLM2 = "smollm2-135m-instruct"
EVAL_SEED_BASE = 100_000
CLIP_EPS = 0.28


def main() -> None:
    args = _arguments()
    from tracec.trace_rl.experiments.learning_curve import RunSpec, learning_curve, prepare_setup
    from tracec.trace_rl.experiments.learning_stats import paired_difference, success_interval
    from tracec.trace_rl.policy.catalog import ModelError, require_device
    from tracec.trace_rl.policy.lora import LoraSection

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    try:
        require_device(args.device, "--device")  # before the games are made
    except ModelError as error:
        sys.exit(f"learning_smollm2: {error}")
    setup = prepare_setup(args.workdir, smollm2_family(args.train_games, args.eval_games))
    spec = RunSpec(method=args.method, model=SMOLLM2, rubric=setup.rubric, lora=LoraSection(rank=16, alpha=32.0),
                   iterations=args.iterations, eval_every=args.iterations, groups_per_batch=args.groups,
                   group_size=args.group_size, lr=args.lr, clip_eps=CLIP_EPS, target_kl=args.target_kl,
                   eval_episodes=args.eval_episodes, eval_greedy=True, threads=args.threads, device=args.device,
                   seed=args.seed)
    name = args.method if args.seed == 0 else f"{args.method}-s{args.seed}"
    out = args.workdir / f"run-{name}"
    began = time.perf_counter()
    probe = None
    if args.minutes:
        probe, fitted = _fit_iterations(setup, spec, args.workdir / f"probe-{name}", args.minutes * 60, began)
        spec = replace(spec, iterations=fitted, eval_every=fitted)
        args.iterations, args.minutes = fitted, None  # the record's command reruns this run, not the fitting
    shutil.rmtree(out, ignore_errors=True)
    curve = learning_curve(setup, spec, out)
    before, after = curve.points[0], curve.points[-1]
    wins = [np.asarray(p.wins, dtype=float)[None] for p in (before, after)]
    gain = paired_difference(*wins)
    summary = {"settings": vars(args) | {"workdir": str(args.workdir)}, "seconds": time.perf_counter() - began,
               "probe_seconds": probe,
               "before": success_interval(wins[0]).level(), "after": success_interval(wins[1]).level(),
               "gain": str(gain), "greedy": [before.greedy, after.greedy], "points": [asdict(p) for p in curve.points],
               "train": [{k: m.get(k) for k in ("success_rate", "ratio_p99", "approx_kl", "optimizer_steps",
                                                 "early_stopped", "time_total")}
                         for m in curve.train_metrics]}
    (args.workdir / f"summary-{name}.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    text = _report(summary, args)
    print(text)
    if args.record:
        command = "python bench/learning_smollm2.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k not in ("record", "workdir", "section") and v is not None)
        record(args.section, text, command + " --record")


class _ProbeDone(Exception):
    """Raised after the probe's one timed iteration: nothing after it is needed."""


def _fit_iterations(setup: Setup, spec: RunSpec, folder: Path, budget_s: float, began: float) -> tuple[float, int]:
    """The probe's iteration seconds and the iterations (at most `spec.iterations`) that fit `budget_s` from `began`.

    One iteration of `spec` is timed in a scratch run (cold: loading and warm-up are in it, so it overestimates);
    the two evaluations (before and after) are costed at its seconds per episode, which hold an update too."""
    from tracec.trace_rl.experiments.learning_curve import learning_curve

    timed: list[float] = []

    def stop(metrics: dict) -> None:
        timed.append(metrics["time_total"])
        raise _ProbeDone

    shutil.rmtree(folder, ignore_errors=True)
    try:
        learning_curve(setup, replace(spec, iterations=1, eval_every=1), folder, on_iteration=stop)
    except _ProbeDone:
        pass
    shutil.rmtree(folder, ignore_errors=True)
    iteration = timed[0]
    evaluation = len(setup.family.eval_seeds) * (spec.eval_episodes + 1) * iteration / spec.rollouts_per_iteration
    left = budget_s - (time.perf_counter() - began) - 2 * evaluation
    return iteration, max(1, min(spec.iterations, int(left // iteration)))


def smollm2_family(train_games: int = 64, eval_games: int = 32) -> TaskFamily:
    """The TextWorld family of this experiment: training seeds 0.., the held-out games from seed 100000."""
    from tracec.trace_rl.envs.textworld.family import TaskFamily

    return TaskFamily(train_seeds=tuple(range(train_games)),
                      eval_seeds=tuple(range(EVAL_SEED_BASE, EVAL_SEED_BASE + eval_games)))


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
    parser.add_argument("--minutes", type=float, help="fit the run to this wall-clock budget: the iterations (at "
                        "most --iterations) are sized from one timed probe iteration")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default 0: torch's own, all cores)")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--section", default="learning, SmolLM2")
    return parser.parse_args()


def _report(summary: dict, args: argparse.Namespace) -> str:
    rows = [[f"{args.method}, seed {args.seed}", args.iterations * args.groups * args.group_size, summary["before"],
             summary["after"],
             summary["gain"], f"{summary['greedy'][0]:.3f} -> {summary['greedy'][1]:.3f}",
             " ".join(f"{m['success_rate']:.2f}" for m in summary["train"]), f"{summary['seconds'] / 60:.1f}"]]
    train = summary["train"]
    probe = summary["probe_seconds"]
    fitted = "" if probe is None else f" (iterations fitted to the time budget by a probe iteration of {probe:.1f} s)"
    trust = (f"Trust region: the largest per-iteration p99 ratio was {max(m['ratio_p99'] for m in train):.2f} "
             f"(1 + 3 eps = {1 + 3 * CLIP_EPS:.2f}) and the largest approximate KL to the sampler "
             f"{max(m['approx_kl'] for m in train):.3f}; {sum(bool(m['early_stopped']) for m in train)} of "
             f"{len(train)} iterations stopped early at the KL target {args.target_kl:g}; "
             f"{sum(m['time_total'] for m in train) / len(train):.1f} s an iteration.")
    return (f"SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), the TextWorld family in the admissible mode, "
            f"{args.iterations} iterations of {args.groups} x {args.group_size} episodes{fitted}, lr {args.lr:g}, "
            f"clip {CLIP_EPS:g}, training seed {args.seed}, "
            f"{args.device}; held-out: {args.eval_games} games x {args.eval_episodes} sampled episodes (and one greedy "
            "a game); the gain's interval is a paired bootstrap over the held-out games (one training seed).\n\n"
            + markdown_table(["method", "training episodes", "held-out before [95% CI]", "after [95% CI]",
                              "gain (paired)", "greedy", "training success by iteration", "minutes"], rows)
            + "\n\n" + trust)

if __name__ == "__main__":
    main()
