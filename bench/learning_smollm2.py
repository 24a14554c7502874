"""SmolLM2-135M-Instruct + LoRA on the TextWorld family: held-out success before and after training, with intervals.

    python bench/learning_smollm2.py [--workdir out/learning-smollm2] [--method trca] [--iterations 10] [--record]
    python bench/learning_smollm2.py --device cuda --iterations 16 --groups 8 --section "learning, SmolLM2 (GPU)"
    python bench/learning_smollm2.py --action-mode generate --method gigpo --seed 2   # free text: the paper's regime
    python bench/learning_smollm2.py --summarize --record --section "..."   # the workdir's runs: one table by method

Why this task: the TextWorld family in the admissible mode, the commands chosen (and the loss on log pi(c|s)) as for
the small policy, is the one shipped environment whose held-out games and sparse reward make "learned something"
measurable on >= 64 held-out episodes; a pretrained model already writes commands, so the comparison is with its own
start, not with a random policy. The held-out games are the experiment's (seeds 100000 ..), never trained on; every
checkpoint meets the same episodes (one fixed stream), so the gain is paired over games: the interval is a bootstrap
over games of after minus before (one seed: the spread over training seeds is not in it, and the section says so).
`--action-mode generate` is TRCA's paper's regime instead: the model writes its command as free text (at most 16
tokens a turn, the admissible commands listed in the observation), the loss on its tokens. `--summarize` reads every
run's summary in the workdir and writes one table: each method's held-out success before and after over its seeds
and the games, and its difference from sparse GRPO's, paired over seeds and games; runs of unequal episodes or modes
are refused. A run killed part way (a CPU run can outlast a session) resumes from its last checkpoint when called
again with the same settings. Left out: vLLM (the admissible mode scores commands with the transformers sampler).
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
    from tracec.trace_rl.experiments.learning_curve import RunSpec, learning_curve, prepare_setup, start_run_folder
    from tracec.trace_rl.experiments.learning_stats import paired_difference, success_interval
    from tracec.trace_rl.grpo.run_folder import checkpoint_iteration
    from tracec.trace_rl.policy.catalog import ModelError, require_device
    from tracec.trace_rl.policy.lora import LoraSection

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    if args.summarize:
        text = summarize(args.workdir)
        print(text)
        if args.record:
            record(args.section, text, f"python bench/learning_smollm2.py --workdir {args.workdir} --summarize")
        return
    try:
        require_device(args.device, "--device")  # before the games are made
    except ModelError as error:
        sys.exit(f"learning_smollm2: {error}")
    setup = prepare_setup(args.workdir, smollm2_family(args.train_games, args.eval_games))
    spec = RunSpec(method=args.method, model=SMOLLM2, rubric=setup.rubric, lora=LoraSection(rank=16, alpha=32.0),
                   iterations=args.iterations, eval_every=args.iterations, groups_per_batch=args.groups,
                   group_size=args.group_size, lr=args.lr, clip_eps=CLIP_EPS, target_kl=args.target_kl,
                   eval_episodes=args.eval_episodes, eval_greedy=True, eval_batch=args.eval_batch,
                   threads=args.threads, device=args.device,
                   action_mode=args.action_mode, seed=args.seed)
    name = args.method if args.seed == 0 else f"{args.method}-s{args.seed}"
    out = args.workdir / f"run-{name}"
    began = time.perf_counter()
    probe = None
    if args.minutes:
        probe, fitted = _fit_iterations(setup, spec, args.workdir / f"probe-{name}", args.minutes * 60, began)
        spec = replace(spec, iterations=fitted, eval_every=fitted)
        args.iterations, args.minutes = fitted, None  # the record's command reruns this run, not the fitting
    checkpoint = start_run_folder(out, asdict(spec))  # a CPU run can outlast a session: a killed one resumes
    done_before = checkpoint_iteration(checkpoint) if checkpoint else 0  # iterations an earlier call trained
    curve = learning_curve(setup, spec, out, resume=checkpoint is not None)
    # a resumed run's seconds: this call's, and the training an earlier call did (its evaluations were lost with it)
    earlier = sum(m["time_total"] for m in curve.train_metrics if m["iteration"] <= done_before)
    before, after = curve.points[0], curve.points[-1]
    wins = [np.asarray(p.wins, dtype=float)[None] for p in (before, after)]
    gain = paired_difference(*wins)
    summary = {"settings": vars(args) | {"workdir": str(args.workdir)},
               "seconds": time.perf_counter() - began + earlier, "probe_seconds": probe,
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
            if k not in ("record", "workdir", "section", "summarize") and v is not None)
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
    parser.add_argument("--method", default="trca", choices=("grpo", "trca", "gigpo", "shaped"))
    parser.add_argument("--action-mode", default="admissible", choices=("admissible", "generate"),
                        help="admissible: choose among the listed commands; generate: write the command (free text)")
    parser.add_argument("--summarize", action="store_true", help="one table of the workdir's runs, by method")
    parser.add_argument("--train-games", type=int, default=64)
    parser.add_argument("--eval-games", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=2, help="sampled episodes a held-out game")
    parser.add_argument("--eval-batch", type=int, default=32,
                        help="most held-out episodes played at once: all 96 of the free-text evaluation at once "
                             "held ~22 GB of caches on the CPU and was killed for memory")
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
    return (f"SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), the TextWorld family in the {args.action_mode} mode, "
            f"{args.iterations} iterations of {args.groups} x {args.group_size} episodes{fitted}, lr {args.lr:g}, "
            f"clip {CLIP_EPS:g}, training seed {args.seed}, "
            f"{args.device}; held-out: {args.eval_games} games x {args.eval_episodes} sampled episodes (and one greedy "
            "a game); the gain's interval is a paired bootstrap over the held-out games (one training seed).\n\n"
            + markdown_table(["method", "training episodes", "held-out before [95% CI]", "after [95% CI]",
                              "gain (paired)", "greedy", "training success by iteration", "minutes"], rows)
            + "\n\n" + trust)


def summarize(workdir: Path) -> str:
    """One table of the runs summarized in `workdir` (`summary-*.json`), by method: before and after over seeds and
    games, the gain, and the difference from sparse GRPO's final paired over seeds and games (seeds in common)."""
    from tracec.trace_rl.experiments.learning_stats import paired_difference, success_interval

    runs = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(workdir.glob("summary-*.json"))]
    if not runs:
        raise SystemExit(f"learning_smollm2: {workdir} holds no run's summary (summary-*.json)")
    shapes = {(r["settings"]["iterations"] * r["settings"]["groups"] * r["settings"]["group_size"],
               r["settings"].get("action_mode", "admissible"), len(r["points"][-1]["wins"])) for r in runs}
    if len(shapes) > 1:
        raise SystemExit(f"learning_smollm2: {workdir}'s runs differ in (episodes, mode, held-out games): "
                         f"{sorted(shapes)}; summarize runs of one budget")
    by_method: dict[str, dict[int, dict]] = {}
    for run in runs:
        by_method.setdefault(run["settings"]["method"], {})[run["settings"]["seed"]] = run

    def wins(method: str, seeds: list[int], point: int) -> np.ndarray:
        return np.array([by_method[method][seed]["points"][point]["wins"] for seed in seeds], dtype=float)

    rows = []
    for method, seeded in sorted(by_method.items(), key=lambda item: item[0] != "grpo"):
        seeds = sorted(seeded)
        before, after = wins(method, seeds, 0), wins(method, seeds, -1)
        shared = sorted(set(seeds) & set(by_method.get("grpo", {})))
        against = str(paired_difference(wins("grpo", shared, -1), wins(method, shared, -1))) \
            if method != "grpo" and shared else ""
        greedy = np.mean([seeded[s]["greedy"][1] for s in seeds])
        minutes = np.mean([seeded[s]["seconds"] for s in seeds]) / 60
        rows.append([method, ", ".join(map(str, seeds)), success_interval(before).level(),
                     success_interval(after).level(), str(paired_difference(before, after)), against,
                     f"{greedy:.3f}", f"{minutes:.1f}"])
    episodes, mode, games = shapes.pop()
    settings = runs[0]["settings"]
    return (f"SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), the TextWorld family in the {mode} mode, {episodes} "
            f"training episodes a run, lr {settings['lr']:g}, {settings['device']}; held-out: {games} games x "
            f"{settings['eval_episodes']} sampled episodes; intervals are 95% bootstrap over seeds and games.\n\n"
            + markdown_table(["method", "seeds", "before [95% CI]", "after [95% CI]", "gain (paired)",
                              "after minus sparse GRPO (paired)", "greedy after (mean)", "minutes a run"], rows))


if __name__ == "__main__":
    main()
