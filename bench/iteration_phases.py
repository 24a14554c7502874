"""Where a training iteration's time goes, sparse GRPO against GRPO + TRCA, at the demo's size and at SmolLM2's: the
reward path timed where it runs, inside training.

    python bench/iteration_phases.py [--rounds 3] [--iterations 4] [--workdir out/phases] [--record]
    python bench/iteration_phases.py --device cuda --sizes smollm2 --record   # the GPU script's split

Two sizes: `demo`, the demo's (`tracec demo`: the small policy on its TextWorld family, 8 groups x 8 episodes,
admissible commands, examples/textworld.rubric) and `smollm2`, SmolLM2-135M-Instruct with LoRA r16 on
examples/envs/tool_calling_precision.rubric (text calls, 2 groups x 4 episodes, up to 3 turns of up to 32 tokens,
examples/toolenv.rubric). Each (size, method, round) is a fresh process (command) that sets a run up as `tracec train`
does and runs ITERATIONS iterations of the trainer's own loop (`grpo.train.iterate`); its phases are the trainer's
metrics: rollout, credit (`time_score`: for TRCA the facts, the rubric's kernel, rewards and advantages; for GRPO the
group standardisation), the update (`time_learn`), the iteration (`time_total`). The first iteration is reported
apart: it is the one that would pay any compilation inside a training run. For TRCA the credit is then split, after
each iteration and outside its timing, on that iteration's own episodes (the median of 5 runs of each part): the
episodes made into a fact batch (`RubricScorer.fact_batch`), the compiled rubric's kernel, `evaluate_rewards`, and
the step advantages spread onto tokens; and the groups the update trained. Methods alternate within a round; rounds
alternate run seeds. With `--device cuda` (bench/gpu_carried.sh, bench/gpu_check.sh) the SmolLM2 size runs on the GPU
with `rollout.backend = "auto"` (vLLM where it is installed), recorded as "iteration phases (GPU)"; the report names
the fixed reward kernels that ran (the C extension, or Numba's compiled ahead), so a compile inside the run shows.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record
from bench.sides import Spread, describe

REPO = Path(__file__).resolve().parents[1]
SIZES = ("demo", "smollm2")
METHODS = ("grpo", "trca")
PHASES = ("time_rollout", "time_score", "time_learn", "time_total")
PARTS = ("facts", "kernel", "rewards", "tokens")
COMMAND = "python bench/iteration_phases.py --record"
GPU_COMMAND = "python bench/iteration_phases.py --device cuda --sizes smollm2 --record"
SMOLLM2_CONFIG = REPO / "examples" / "train" / "tool_calling_trca.toml"
SMOLLM2_SETTINGS = ["rollout.group_size=4", "rollout.groups_per_batch=2", "rollout.max_new_tokens=32",
                    "env.max_turns=3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=Path("out/phases"))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (the SmolLM2 size only: the demo's policy is "
                                                         "a CPU model)")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    parser.add_argument("--child", nargs=4, metavar=("SIZE", "METHOD", "SEED", "ITERATIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        size, method, seed, iterations = args.child
        _child(size, method, int(seed), int(iterations), args.workdir, args.device)
        return
    sizes = [s for s in args.sizes.split(",") if s]
    if args.device != "cpu" and sizes != ["smollm2"]:
        parser.error("--device cuda runs the SmolLM2 size only: add --sizes smollm2")
    if "demo" in sizes:
        _demo_setup(args.workdir)  # the games and the small policy, built once before any timed process
    runs: dict[tuple[str, str], list[list[dict[str, Any]]]] = {(s, m): [] for s in sizes for m in METHODS}
    for round_ in range(args.rounds):
        for size in sizes:
            for method in METHODS:
                command = [sys.executable, __file__, "--workdir", str(args.workdir), "--device", args.device,
                           "--child", size, method, str(round_), str(args.iterations)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[size, method].append([json.loads(line) for line in done.stdout.splitlines() if line.strip()])
    report = _report(runs, args.rounds, args.iterations, args.device)
    print(report)
    if args.record:
        gpu = args.device != "cpu"
        record("iteration phases (GPU)" if gpu else "iteration phases", report, GPU_COMMAND if gpu else COMMAND)


def _demo_setup(workdir: Path) -> Any:
    from tracec.trace_rl.experiments.demo import DEMO_FAMILY
    from tracec.trace_rl.experiments.demo_settings import DemoBudget
    from tracec.trace_rl.experiments.learning_curve import prepare_setup

    return prepare_setup(workdir, DEMO_FAMILY, hidden=DemoBudget().hidden)


def _config(size: str, method: str, seed: int, iterations: int, workdir: Path, out: Path,
            device: str) -> tuple[Any, Callable[[], Any] | None]:
    """The run's config and, for the demo, its environment factory (and torch at the demo's one thread)."""
    from dataclasses import replace

    from tracec.trace_rl.grpo.config import load_config

    if size == "demo":
        import torch
        from tracec.trace_rl.envs.textworld.family import FamilyEnvironment
        from tracec.trace_rl.experiments.demo import method_spec
        from tracec.trace_rl.experiments.demo_settings import DemoBudget
        from tracec.trace_rl.experiments.learning_curve import run_config

        setup = _demo_setup(workdir)
        spec = replace(method_spec(method, setup, DemoBudget(), seed=seed), iterations=iterations, eval_every=1000)
        torch.set_num_threads(spec.threads)
        return run_config(spec, setup, out), lambda: FamilyEnvironment(setup.family, setup.games, list_commands=False)
    backend = "transformers" if device == "cpu" else "auto"  # auto: vLLM on a GPU where it is installed
    settings = [*SMOLLM2_SETTINGS, f"rollout.backend={backend}", f"model.device={device}",
                f"advantage.kind={method}", f"iterations={iterations}", f"run.seed={seed}", f"run.out={out}",
                "run.checkpoint_every=1000"]
    return load_config(SMOLLM2_CONFIG, settings), None


def _child(size: str, method: str, seed: int, iterations: int, workdir: Path, device_name: str) -> None:
    """One run: a JSON line per iteration, its phases and (TRCA) its credit's parts, on stdout."""
    from tracec.runtime.rewards.fixed_kernels import fixed_kernels
    from tracec.trace_rl.grpo.distributed import process_group
    from tracec.trace_rl.grpo.train import iterate, set_up

    with tempfile.TemporaryDirectory() as folder, process_group(device_name) as (dist, device):
        out = Path(folder) / "run"
        config, make_env = _config(size, method, seed, iterations, workdir, out, device_name)
        run = set_up(config, out, resume=False, make_env=make_env, make_sampler=None, dist=dist, device=device)
        keeping = KeepingCredit(run.credit)
        run.credit = keeping
        for iteration in range(iterations):
            metrics = iterate(run, config, dist, iteration)
            line = {phase: float(metrics.get(phase, 0.0)) for phase in PHASES}
            line["groups_trained"] = int(metrics.get("groups_trained", 0))
            scorer = getattr(keeping.credit, "scorer", None)
            if scorer is not None:
                line.update(credit_parts(scorer, keeping.episodes))
            line["steps"] = sum(e.turns for e in keeping.episodes)
            line["fixed_native"] = fixed_kernels().native
            print(json.dumps(line), flush=True)
        del run, keeping
        gc.collect()


class KeepingCredit:
    """The run's credit, keeping the episodes of its last call for a breakdown after the iteration."""

    def __init__(self, credit: Callable[[Sequence[Any]], list[Any]]) -> None:
        self.credit = credit
        self.episodes: list[Any] = []

    def __call__(self, episodes: Sequence[Any]) -> list[Any]:
        self.episodes = list(episodes)
        return self.credit(episodes)


def credit_parts(scorer: Any, episodes: Sequence[Any], repeats: int = 5) -> dict[str, float]:
    """Seconds of each part of TRCA's credit on `episodes` (the median of `repeats` runs of each)."""
    from tracec.runtime.rewards.trca import evaluate_rewards
    from tracec.trace_rl.grpo.credit import _as_episode, token_advantages

    def timed(part: Callable[[], Any]) -> tuple[float, Any]:
        seconds, result = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            result = part()
            seconds.append(time.perf_counter() - start)
        return statistics.median(seconds), result

    facts, batch = timed(lambda: scorer.fact_batch([_as_episode(e) for e in episodes]))
    kernel, (fired, keys) = timed(lambda: scorer.kernel.run(batch.columns, batch.n_transitions))
    rewards, result = timed(lambda: evaluate_rewards(fired, batch.episode_offsets, batch.env_reward,
                                                     batch.task_group, keys, scorer.fire_weight,
                                                     scorer.coverage_weight, scorer.config))
    offsets = batch.episode_offsets
    tokens, _ = timed(lambda: [token_advantages(e, result.A[offsets[i]:offsets[i + 1]])
                               for i, e in enumerate(episodes)])
    return {"facts": facts, "kernel": kernel, "rewards": rewards, "tokens": tokens}


def _report(runs: dict[tuple[str, str], list[list[dict[str, Any]]]], rounds: int, iterations: int,
            device: str) -> str:
    def spread(lines: list[dict[str, Any]], key: str, scale: float = 1.0) -> Spread:
        return Spread.of([line.get(key, 0.0) * scale for line in lines])

    rows, parts = [], []
    for (size, method), per_round in runs.items():
        later = [line for lines in per_round for line in lines[1:]]  # iterations 2.. of every round
        first = [lines[0] for lines in per_round]
        rows.append([size, method, *(spread(later, phase).cell(2, " s") for phase in PHASES),
                     spread(first, "time_score").cell(2, " s"),
                     f"{statistics.median(line['time_score'] / line['time_total'] for line in later):.1%}",
                     f"{statistics.median(line['groups_trained'] for line in later):.0f}"])
        if method == "trca":
            parts.append([size, f"{statistics.median(line['steps'] for line in later):.0f}",
                          *(spread(later, part, 1e3).cell(1, " ms") for part in PARTS)])
    native = {line.get("fixed_native") for per_round in runs.values() for lines in per_round for line in lines}
    fixed = ("the C extension `tracec.runtime._fixed`" if native == {True}
             else "Numba's (from its cache, or compiled in the run)" if native == {False}
             else "the C extension in some runs, Numba's in others")
    lines = [
        (f"Each (size, method) ran {rounds} times, a fresh process each, {iterations} iterations a run, on "
         f"{'the GPU (' + device + ')' if device != 'cpu' else 'the CPU'}; figures are medians over the iterations "
         "after the first of every run (range in brackets), the first iteration's credit apart. "
         + describe(rounds, "command", f"torch's default in each process ({os.cpu_count()} cores here); the demo's "
                    "runs set 1, as the demo does")),
        "",
        markdown_table(["size", "method", "rollout", "credit (facts, scoring, advantages)", "update",
                        "iteration", "credit, first iteration", "credit's share", "groups trained"], rows),
        "",
        ("The update trains only the groups whose advantages are not all zero (`advantage.filter_constant_groups`): "
         "sparse GRPO's groups that all failed or all won teach nothing and are dropped, TRCA's dense credit keeps "
         "them, so the 'groups trained' column is what a TRCA iteration's extra update time buys; the credit itself "
         f"is the 'credit's share'. The fixed reward kernels that ran: {fixed}. A compile inside the run would show "
         "as a first iteration's credit well above the later ones' (the rubric's own kernel comes from the on-disk "
         "cache or is compiled at set-up, before the first iteration)."),
        "",
        ("TRCA's credit split on each iteration's own episodes (the median of 5 runs of each part, outside the "
         "iteration's timing):"),
        "",
        markdown_table(["size", "steps an iteration", "episodes to a fact batch", "the rubric's kernel",
                        "rewards and advantages", "advantages onto tokens"], parts),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
