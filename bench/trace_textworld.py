"""TRACE on the TextWorld family, every condition of issue 34's table on the same held-out games.

    python bench/trace_textworld.py --split validation --seeds 1     # the choices (base agent, environments)
    python bench/trace_textworld.py --split test --seeds 5 --record  # the table, read once

1. The target: the 2-4-step quests in 8 turns (256 training games), the small policy of `bench/learning.py`
   (`--model smollm2-135m-instruct --device cuda`: SmolLM2 in the admissible mode instead, bench/gpu_trace.sh).
2. The base agent: the policy after `--base-iterations` of sparse GRPO on the training games, folded into its
   weights (`trace_conditions.save_base_agent`); its success on the split is the base condition.
3. The analysis as TRACE runs it: `--label-runs` labelling runs, each the base agent's own sample of
   `--label-episodes` episodes on each of the first `--collection-games` training games, every episode labelled
   from its game's plan (`trace_family.episode_labels`), then TRACE's selection (rho, delta, k of the runs).
4. Capability environments: for each capability, the first `--env-games` games of a pool (seeds 400000.., quests of
   `--pool-lengths` steps) whose plans need it; the base agent's success on each beside TRACE's band [0.2, 0.6].
5. Training, for each of `--seeds` seeds: one adapter per selected capability and one for the capability that
   selection did not keep with the smallest contrast (does selection matter?), `--adapter-iterations` each; the mixture
   (multi-capability GRPO on the selected environments, equal weights) and GRPO on the target, each with the
   selected adapters' rollouts together; linear and TIES merges of the selected adapters.
6. Evaluation on the split's 32 games, `--eval-episodes` a game from one random stream a game: base, GRPO on the
   target, each adapter alone on every game, mixture, merges, TRACE routed (the need probe, `trace_conditions`) and
   the oracle router. Paired intervals over seeds and games (`learning_stats.paired_difference`).
Everything is saved in `--workdir` and reused by a rerun with the same settings (one with others is refused, the
folder and the settings named); a killed training run resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record
from tracec.atomic import write_atomic

if TYPE_CHECKING:
    from tracec.trace_rl.envs.textworld.family import TaskFamily

SPLITS = {"validation": 200_000, "test": 300_000}


def main() -> None:
    args = _arguments()
    from tracec.trace_rl.experiments.learning_curve import prepare_setup
    from tracec.trace_rl.experiments.trace_experiment import TraceBudget, TraceExperiment, summary_lines, table_rows
    from tracec.trace_rl.policy.catalog import ModelError, require_device

    from tracec.config_io import ConfigError
    from tracec.quiet import quiet_libraries

    quiet_libraries()
    began = time.perf_counter()
    try:
        require_device(args.device, "--device")  # before the games are made
    except ModelError as error:
        raise SystemExit(f"trace_textworld: {error}") from None
    setup = prepare_setup(args.workdir, target_family(args.split, args.train_games, args.eval_games), hidden=128,
                          layers=2)
    budget = TraceBudget(**{name: getattr(args, name) for name in TraceBudget.__dataclass_fields__})
    try:
        experiment = TraceExperiment(setup, budget, args.workdir, split=args.split)
        table = experiment.run()
    except ConfigError as error:  # a workdir made with another budget
        raise SystemExit(f"trace_textworld: {error}") from None
    lines = [(f"base agent: {experiment.base} (how: base_agent.json there), success on the {args.split} games "
             f"{np.mean(table['base']):.3f}"), *summary_lines(table)]
    if table["conditions"]:
        header, rows = table_rows(table)
        shape = table["conditions"]["base"].shape
        lines += [(f"training runs: {sorted({v['rollouts'] for v in table['trained'].values()})} rollouts; "
                  f"{shape[0]} seeds; {shape[1]} games x {shape[2]} episodes a condition"), "",
                  markdown_table(header, rows)]
    text = "\n".join(lines)
    print(text)
    write_atomic(experiment.folder / "table.md", [text])
    if args.record:
        record(args.section or f"trace textworld {args.split}", text, "python " + " ".join(sys.argv))
    print(f"{time.perf_counter() - began:.0f} s", file=sys.stderr)


def target_family(split: str, train_games: int = 256, eval_games: int = 32) -> TaskFamily:
    """The target: 2-4-step quests in 8 turns, training games 0.., held-out games the split's."""
    from tracec.trace_rl.envs.textworld.family import TaskFamily

    first = SPLITS[split]
    return TaskFamily(quest_lengths=(2, 3, 4), max_turns=8, train_seeds=tuple(range(train_games)),
                      eval_seeds=tuple(range(first, first + eval_games)))


def _arguments() -> argparse.Namespace:
    from tracec.trace_rl.experiments.trace_experiment import TraceBudget

    defaults = TraceBudget()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/trace-textworld"))
    parser.add_argument("--split", choices=tuple(SPLITS), default="validation")
    parser.add_argument("--train-games", type=int, default=256)
    parser.add_argument("--eval-games", type=int, default=32)
    for name, value in vars(defaults).items():  # every budget is an option, with TraceBudget's default
        kind = (lambda text: tuple(int(n) for n in text.split(","))) if isinstance(value, tuple) else type(value)
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=value)
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    parser.add_argument("--section", help="the section's title (default: trace textworld SPLIT)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
