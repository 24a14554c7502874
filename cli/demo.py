"""`tracec demo [--workdir DIR] [budget options]`: a policy learns TextWorld games with TRCA and with sparse GRPO.

The defaults finish in about 12 minutes on 2 cores (`trace_rl.experiments.demo`); every budget option scales it up.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracec.cli.errors import UsageError
from tracec.cli.paths import kernel_cache, work_folder

from tracec.arguments import integer, number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tracec.trace_rl.experiments.demo_settings import EVAL_SEED_BASE, DemoBudget

    default = DemoBudget()
    parser.add_argument("--workdir", type=Path, default=Path("out/demo"), metavar="DIR",
                        help="where the games, runs, curves and summary go (default: out/demo)")
    budget = parser.add_argument_group("budget (the small policy; each method gets the same)")
    budget.add_argument("--train-games", type=integer(1, EVAL_SEED_BASE), default=32,
                        help=f"training games: seeds 0 .. N-1, N at most {EVAL_SEED_BASE} (default 32)")
    budget.add_argument("--eval-games", type=integer(1), default=24,
                        help="held-out games: seeds 100000 .. 100000+N-1, never trained on (default 24)")
    budget.add_argument("--iterations", type=integer(1), default=default.iterations,
                        help=f"training iterations a method (default {default.iterations})")
    budget.add_argument("--eval-every", type=integer(1), default=default.eval_every,
                        help=f"iterations between held-out evaluations (default {default.eval_every})")
    budget.add_argument("--groups", type=integer(1), default=default.groups,
                        help=f"task groups an iteration (default {default.groups})")
    budget.add_argument("--group-size", type=integer(1), default=default.group_size,
                        help=f"episodes a group (default {default.group_size})")
    budget.add_argument("--eval-episodes", type=integer(1), default=default.eval_episodes,
                        help=f"episodes a held-out game at each evaluation (default {default.eval_episodes})")
    budget.add_argument("--lr", type=number(0, above=True), default=default.lr,
                        help=f"learning rate (default {default.lr})")
    budget.add_argument("--sequential", action="store_true", help="train the two methods one after the other "
                        "(default: side by side, one process each)")
    trace = parser.add_argument_group("TRACE (capability adapters against GRPO on the same games)")
    trace.add_argument("--trace-iterations", type=integer(0), default=default.trace_iterations,
                       help=f"iterations each capability adapter trains, 0 skips the section (default "
                            f"{default.trace_iterations})")
    trace.add_argument("--trace-pool-games", type=integer(1), default=default.trace_pool_games,
                       help=f"short quests the capability environments are drawn from (default "
                            f"{default.trace_pool_games})")
    smol = parser.add_argument_group("SmolLM2-135M-Instruct")
    smol.add_argument("--smol-iterations", type=integer(0), default=default.smol_iterations,
                      help=f"training iterations, 0 skips the stage (default {default.smol_iterations})")
    smol.add_argument("--smol-eval-seeds", type=integer(1), default=default.smol_eval_seeds,
                      help=f"held-out games it is evaluated on (default {default.smol_eval_seeds})")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.experiments.demo_settings import DemoBudget

    if args.iterations % args.eval_every:
        raise UsageError(f"--iterations ({args.iterations}) must be a multiple of --eval-every ({args.eval_every})")
    budget = DemoBudget(iterations=args.iterations, eval_every=args.eval_every, groups=args.groups,
                        group_size=args.group_size, eval_episodes=args.eval_episodes, lr=args.lr,
                        trace_iterations=args.trace_iterations, trace_pool_games=args.trace_pool_games,
                        smol_iterations=args.smol_iterations, smol_eval_seeds=args.smol_eval_seeds,
                        parallel=not args.sequential)
    kernel_cache()  # TRCA compiles the rubric's kernels: an unwritable cache is said before any work
    workdir = work_folder(args.workdir)
    from tracec.trace_rl.experiments.demo import demo_family, run_demo  # the trainer: torch, textworld

    return run_demo(workdir, budget, family=demo_family(args.train_games, args.eval_games),
                    verbose=args.library_output)  # `tracec --library-output demo`
