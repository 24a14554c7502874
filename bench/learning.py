"""The learning experiment: sparse GRPO against GRPO + TRCA on the TextWorld task family, with the statistics that
can tell them apart, after a learnability gate.

    python bench/learning.py [--workdir out/learning] [--seeds 5] [--ablation-seeds 3] [--jobs 2] [--record]

1. The gate (is the family learnable by this policy at all?): the untrained policy, a state-blind verb prior
   (`learnability.VerbPrior`), behaviour cloning on the training walkthroughs (`--bc-epochs`), and a training run
   with the oracle credit (+1 on the plan's next command, -1 elsewhere) at the comparison's budget
   (`--oracle-iterations`), and its variants tried to pass the gate (`GATE_VARIANTS`).
2. The comparison: `--seeds` seeds each of sparse GRPO, GRPO + TRCA (examples/textworld.rubric), GiGPO and shaped
   GRPO (the same rubric's return as the episode's reward: TRCA's shaping without its step credit), TRCA and shaped
   GRPO again with examples/textworld_blind.rubric (which reads nothing of the objective), and the TRCA ablations
   lambda = 0, lambda = 1, no context grouping and A_S mean-only (`step_scale none`; `--ablation-seeds` each), every
   run on the same budget and settings, the command-level loss of the admissible mode, at `--lr` or each trainer
   credit's own rate (`--lr-by-method`, chosen on validation runs by `bench/preregistered.py rates`).
3. Evaluation: every checkpoint on the held-out games (fixed in `TaskFamily`, never trained on), `--eval-episodes`
   sampled episodes a game from one fixed stream plus one greedy episode a game. Statistics (`learning_stats`):
   each point's success with a 95% bootstrap interval over seeds and games; TRCA minus GRPO paired over games at
   B/4, B/2 and B and in the area under the curve; the primary metric, TRCA's rollouts to reach 50% and 100% of
   GRPO's final success over GRPO's own, per seed and as a ratio with its interval.
Each run's curve is saved as JSON in the workdir and reused by a rerun with the same settings, and a run killed
part way resumes from its last checkpoint with the points it had evaluated, so an interrupted experiment continues
where it stopped. `--record` writes the "learning" section of bench/RESULTS.md and the PNGs
beside it. Runs go `--jobs` at a time, one torch thread each. `--extend-from DIR` makes a longer run (more
`--iterations`) from DIR's finished run of the same seed and settings, training on from its last checkpoint: with a
constant rate the first iterations of a longer run are the shorter run's, so they are not paid for twice; for the same
reason a run is read off a longer saved one's first half (`prefix_curve`). `--archive` keeps each finished run in the
section's archive (bench/learning_curves), where a rerun with the same settings finds it after its workdir has gone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import MISSING, asdict, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracec.trace_rl.experiments.learning_stats import (
    paired_auc,
    paired_difference,
    reach_ratio,
    seed_paired_area,
    seeds_both_ran,
    success_interval,
)

from bench.preregistered import analysis, read_archive, report, training_cpu_s, wins_array
from bench.results import markdown_table, record
from tracec.atomic import atomic_open, write_atomic
from tracec.config_io import ConfigError
from tracec.worker_pool import worker_pool

CURVE_ARCHIVE = Path(__file__).resolve().parent / "learning_curves"  # each recorded section's runs
# The held-out games' first seed by split: `heldout` is what every recorded section so far evaluated on (and was
# tuned on); under issue 35's protocol (docs/learning.md) choices are made on `validation` and the pre-registered
# runs are evaluated once on `test`, games no run had played before.
EVAL_SPLITS = {"heldout": 100_000, "validation": 200_000, "test": 300_000}
DIAGNOSED_GAMES = 32  # the rubric's diagnostics play each of the first training games 9 times
TRAIN_METRICS = ("success_rate", "steps", "early_stopped", "entropy", "constant_fraction")  # kept an iteration
FAMILY_SHAPE = ("rooms", "objects", "quest_lengths", "max_turns", "objective")  # what a run or the gate is keyed by


def main() -> None:
    args = _arguments()
    from tracec.trace_rl.envs.textworld.family import TaskFamily
    from tracec.trace_rl.experiments.learning_curve import prepare_setup

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    began = time.perf_counter()
    shape = {name: getattr(args, name) for name in ("quest_lengths", "max_turns", "objective") if getattr(args, name)}
    family = TaskFamily(**shape, train_seeds=tuple(range(args.train_games)),  # fixed before any tuning
                        eval_seeds=tuple(range(EVAL_SPLITS[args.eval_split],
                                               EVAL_SPLITS[args.eval_split] + args.eval_games)))
    setup = prepare_setup(args.workdir, family, hidden=args.hidden, layers=args.layers, rubric=args.rubric)
    if args.extend_from:  # the continued runs' policy is the one they began with, where they began
        setup = replace(setup, small_policy=_extended_policy(args.extend_from, setup.small_policy.name))
    runs = {name: run for name, run in _runs(args, setup).items()
            if not args.only or name.rsplit("-s", 1)[0] in args.only}
    with ThreadPoolExecutor(max_workers=1) as side:  # the gate in this process while the pool trains
        gate_future = side.submit(_cached, args.workdir / "gate.json", _gate_key(args, family),
                                  lambda: _gate(setup, args))
        curves = _run_all(runs, setup, args)
        gate = gate_future.result()
    summary = _summarize(curves, gate, args)
    summary["not_run"] = [name for name in runs if name not in curves]
    summary["quest_lengths"], summary["max_turns"] = list(family.quest_lengths), family.max_turns
    probed = replace(setup, family=replace(family, train_seeds=family.train_seeds[:DIAGNOSED_GAMES]))
    summary["diagnostics"] = _cached(args.workdir / "diagnostics.json", {"games": DIAGNOSED_GAMES},
                                     lambda: _diagnostics(probed))
    summary["wall_s"] = time.perf_counter() - began
    (args.workdir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    figures = _plots(curves, args.workdir)
    print(_report(summary, args))
    if args.record:
        _record(summary, curves, figures, args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/learning"))
    parser.add_argument("--train-games", type=int, default=256, help="training games: seeds 0 .. N-1")
    parser.add_argument("--eval-games", type=int, default=32, help="held-out games: seeds from the split's first")
    parser.add_argument("--eval-split", choices=tuple(EVAL_SPLITS), default="heldout",
                        help="which held-out games: heldout (100000.., every recorded section), validation "
                             "(200000..: tuning), test (300000..: the pre-registered runs only)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the runs' training seeds are first-seed .. first-seed + seeds - 1 (fresh seeds: "
                             "ones no run has used)")
    parser.add_argument("--quest-lengths", type=lambda text: tuple(int(n) for n in text.split(",")),
                        help="the family's quest lengths, e.g. 2,3,4 (seed s has the (s mod n)-th; default: "
                             "TaskFamily's)")
    parser.add_argument("--max-turns", type=int, help="turns an episode may take (default: TaskFamily's)")
    parser.add_argument("--objective", choices=("steps", "goal"),
                        help="steps: TextWorld's objective, which spells out the quest (default) | goal: its last act "
                             "only, a family whose objective does not read as the plan")
    parser.add_argument("--rubric", type=Path, help="TRCA's and shaped GRPO's rubric (default: "
                        "examples/textworld.rubric; examples/textworld_blind.rubric reads nothing of the objective)")
    parser.add_argument("--hidden", type=int, default=128, help="the small policy's width")
    parser.add_argument("--layers", type=int, default=2, help="the small policy's depth")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of sparse GRPO and of TRCA")
    parser.add_argument("--ablation-seeds", type=int, default=3, help="seeds of each TRCA ablation (0: none)")
    parser.add_argument("--oracle-seeds", type=int, default=1, help="seeds of the oracle-credit run (the gate)")
    parser.add_argument("--oracle-iterations", type=int,
                        help="the oracle-credit run's iterations (default: --iterations); compared over the common "
                             "budget, its gate figure also at its own")
    parser.add_argument("--iterations", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--lr-by-method", type=_rates, default={},
                        help="each trainer credit's rate, e.g. grpo=2e-3,trca=5e-3 (its ablations and rubric variants "
                             "take it too; a credit not named takes --lr)")
    parser.add_argument("--extend-from", type=Path,
                        help="a workdir whose finished runs of the same seeds and settings, with fewer iterations, "
                             "these runs continue")
    parser.add_argument("--clip-eps", type=float, default=0.28)
    parser.add_argument("--target-kl", type=float, default=0.05)
    parser.add_argument("--eval-episodes", type=int, default=8, help="sampled episodes a held-out game")
    parser.add_argument("--bc-epochs", type=int, default=8, help="behaviour cloning's passes over the walkthroughs")
    parser.add_argument("--bc-lr", type=float, default=5e-3)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one torch thread each)")
    parser.add_argument("--only", type=lambda text: text.split(","),
                        help="run and report only these methods, e.g. trca-meanonly,grpo (a share of the runs in "
                             "another process or workdir; their saved curves join the rest by name)")
    parser.add_argument("--saved-only", action="store_true",
                        help="report the runs already saved with these settings, run none (an interrupted experiment)")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section (--section)")
    parser.add_argument("--section", default="learning", help="the section of bench/RESULTS.md to write")
    parser.add_argument("--archive", action="store_true",
                        help="keep each run in the section's curve archive (bench/learning_curves) as it finishes, "
                             "so that a later session or clone whose workdir has gone reuses it")
    parser.add_argument("--notes", type=Path, help="a Markdown file of findings to append to the section")
    return parser.parse_args()


BLIND_RUBRIC = "textworld_blind.rubric"  # shipped beside textworld.rubric; reads nothing of the objective
METHODS = (("grpo", "sparse GRPO", {"method": "grpo"}),
           ("trca", "GRPO + TRCA", {"method": "trca"}),
           ("gigpo", "GiGPO", {"method": "gigpo"}),  # the paper's closest relative: anchor-state step groups
           ("shaped", "shaped GRPO", {"method": "shaped"}),  # TRCA's rubric return, at the episode level only
           ("trca-blind", "GRPO + TRCA, blind rubric", {"method": "trca", "rubric": BLIND_RUBRIC}),
           ("shaped-blind", "shaped GRPO, blind rubric", {"method": "shaped", "rubric": BLIND_RUBRIC}))
ABLATIONS = (("trca-lam0", "TRCA, lambda = 0", {"method": "trca", "lam": 0.0}),
             ("trca-lam1", "TRCA, lambda = 1", {"method": "trca", "lam": 1.0}),
             ("trca-nocontext", "TRCA, no context grouping", {"method": "trca", "context_grouping": False}),
             ("trca-meanonly", "TRCA, A_S mean-only", {"method": "trca", "step_scale": "none"}))
ORACLE = ("oracle", "oracle credit (gate)", {"method": "oracle"})
# the oracle's variants tried to pass the gate: its credit weighted for imitation, then also more optimizer steps,
# or a command's score as the sum of its tokens' log-probs (the mean caps how sharp pi(c|s) can get)
GATE_VARIANTS = (("oracle-imitation", "oracle credit, imitation-weighted (gate)",
                  {"method": "oracle", "oracle": "imitation"}),
                 ("oracle-imitation-mb4", "oracle credit, imitation-weighted, 4 mini-batches (gate)",
                  {"method": "oracle", "oracle": "imitation", "mini_batches": 4}),
                 ("oracle-imitation-sum", "oracle credit, imitation-weighted, sum score (gate)",
                  {"method": "oracle", "oracle": "imitation", "choice_score": "sum"}))


def _runs(args: argparse.Namespace, setup: Any) -> dict[str, tuple[str, Any]]:
    """Every training run of the experiment by name: (label, spec)."""
    from tracec.trace_rl.experiments.demo_settings import shipped_examples
    from tracec.trace_rl.experiments.learning_curve import RunSpec

    def settings(extra: dict[str, Any]) -> dict[str, Any]:
        """A run's own settings: its shipped rubric by path, its credit's rate where `--lr-by-method` names one."""
        own = extra | ({"rubric": shipped_examples() / extra["rubric"]} if "rubric" in extra else {})
        return own | ({"lr": args.lr_by_method[own["method"]]} if own["method"] in args.lr_by_method else {})

    common = {"model": str(setup.small_policy), "rubric": setup.rubric, "iterations": args.iterations,
              "eval_every": args.eval_every, "groups_per_batch": args.groups, "group_size": args.group_size,
              "lr": args.lr, "clip_eps": args.clip_eps, "target_kl": args.target_kl,
              "eval_episodes": args.eval_episodes, "eval_greedy": True}
    oracle_budget = {"iterations": args.oracle_iterations or args.iterations}
    plan = [(0, m, args.seeds) for m in METHODS] + \
        [(0, (*ORACLE[:2], ORACLE[2] | oracle_budget), args.oracle_seeds)] + \
        [(0, variant, args.oracle_seeds) for variant in GATE_VARIANTS] + \
        [(1, a, args.ablation_seeds) for a in ABLATIONS]
    # the comparison (and the gate's oracle) before the ablations, seeds interleaved across methods: an
    # interrupted experiment holds as many seeds of each
    order = sorted(((tier, seed, index, run) for index, (tier, run, seeds) in enumerate(plan)
                    for seed in range(args.first_seed, args.first_seed + seeds)),
                   key=lambda item: item[:3])
    return {f"{key}-s{seed}": (label, RunSpec(**common | settings(extra), seed=seed))
            for _, seed, _, (key, label, extra) in order}


def _rates(text: str) -> dict[str, float]:
    """`--lr-by-method`'s value: credit=rate pairs, each credit one the trainer has."""
    from tracec.trace_rl.experiments.learning_curve import METHODS as CREDITS

    rates = {}
    for pair in text.split(","):
        credit, _, rate = pair.partition("=")
        if credit not in CREDITS:
            raise argparse.ArgumentTypeError(f"{credit!r} is not a trainer credit ({', '.join(CREDITS)})")
        try:
            rates[credit] = float(rate)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{credit}'s rate {rate!r} is not a number") from None
    return rates


def _cached(path: Path, key: dict[str, Any], compute: Any) -> dict[str, Any]:
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            return saved
    value = {"key": key, **compute()}
    path.write_text(json.dumps(value, indent=2, default=str) + "\n", encoding="utf-8")
    return value


def _gate_key(args: argparse.Namespace, family: Any) -> dict[str, Any]:
    return {k: getattr(args, k) for k in ("train_games", "eval_games", "hidden", "layers", "eval_episodes",
                                          "bc_epochs", "bc_lr")} | _family_key(family)


def _gate(setup: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The untrained policy, the verb prior and behaviour cloning on the held-out games."""
    import torch
    from tracec.trace_rl.experiments.learnability import VerbPrior, clone_walkthroughs, walkthrough_episodes
    from tracec.trace_rl.experiments.learning_curve import (
        EVAL_STREAM,
        SMALL_LORA,
        RunSpec,
        _environment,
        evaluate,
    )
    from tracec.trace_rl.policy.model import Policy

    torch.set_num_threads(1)
    spec = RunSpec(method="grpo", model=str(setup.small_policy), eval_episodes=args.eval_episodes)
    make = lambda: _environment(setup, spec)
    began = time.perf_counter()
    prior = VerbPrior.fit(make, setup.family.train_seeds)
    prior_wins = prior.play(make, setup.family.eval_seeds, episodes=args.eval_episodes,
                            max_turns=setup.family.max_turns, seed=EVAL_STREAM)
    policy = Policy.load(spec.model, SMALL_LORA, seed=0)
    untrained = evaluate(policy, setup, spec)
    untrained_greedy = evaluate(policy, setup, spec, greedy=True)
    episodes = walkthrough_episodes(policy, make, setup.family.train_seeds, max_turns=setup.family.max_turns)
    losses = clone_walkthroughs(policy, episodes, epochs=args.bc_epochs, lr=args.bc_lr)
    cloned = evaluate(policy, setup, spec)
    cloned_greedy = evaluate(policy, setup, spec, greedy=True)
    return {"verb_prior": {"weights": prior.weights, "wins": prior_wins.tolist()},
            "untrained": {"wins": untrained.wins, "greedy": untrained_greedy.success},
            "cloned": {"wins": cloned.wins, "greedy": cloned_greedy.success, "losses": losses,
                       "plan_steps": sum(len(e.choice_turns) for e in episodes)},
            "seconds": time.perf_counter() - began}


def _spec_key(spec: Any, family: Any) -> dict[str, Any]:
    """The spec's fields that differ from RunSpec's defaults, and the family's shape where it differs from the
    family's default: a field added to RunSpec later (with a default that keeps the old behaviour) leaves the
    saved runs valid."""
    changed = {f.name: getattr(spec, f.name) for f in fields(spec)
               if f.default is MISSING or getattr(spec, f.name) != f.default} | _family_key(family)
    for name in ("model", "rubric"):  # by name: another workdir or clone holds the same policy and rubric
        if changed.get(name) is not None:
            changed[name] = Path(changed[name]).name
    return json.loads(json.dumps(changed, default=_plain))


def _family_key(family: Any) -> dict[str, Any]:
    """The family's shape (not its seeds, keyed apart) where it differs from TaskFamily's defaults."""
    defaults = {f.name: f.default for f in fields(family)}
    return {name: list(value) if isinstance(value, tuple) else value for name in FAMILY_SHAPE
            if (value := getattr(family, name)) != defaults[name]}


def _plain(value: object) -> object:
    """A field's value as JSON: a nested dataclass (the LoRA section) as its fields, anything else as text."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else str(value)


def _run_all(runs: dict[str, tuple[str, Any]], setup: Any, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each run's curve (as saved JSON), running those not saved yet with these settings."""
    done: dict[str, dict[str, Any]] = {}
    todo = {}
    recorded = _recorded_curves()
    for name, (label, spec) in runs.items():
        path, key = args.workdir / "curves" / f"{name}.json", _spec_key(spec, setup.family)
        saved = [json.loads(path.read_text())] if path.is_file() else []
        kept = [c for c in [*saved, *recorded] if c["name"] == name]
        if found := next((c for c in kept if c["spec"] == key), None):
            done[name] = found
        elif found := next((p for c in kept if (p := prefix_curve(c, key)) is not None), None):
            done[name] = found | {"label": label}
        else:
            todo[name] = (label, spec)
    if args.saved_only:
        print(f"{len(done)} runs saved; not run: {', '.join(todo) or 'none'}", file=sys.stderr, flush=True)
        return done
    if args.archive and done:
        _archive(done, args.section)
    print(f"{len(done)} runs saved, {len(todo)} to run, {args.jobs} at a time", file=sys.stderr, flush=True)
    with worker_pool(args.jobs) as pool:
        futures = {pool.submit(_one_run, name, *todo[name], setup, args.workdir, args.extend_from): name
                   for name in todo}
        for future in as_completed(futures):
            name = futures[future]
            try:
                done[name] = future.result()
            except ConfigError as error:  # e.g. a run folder holding another config's run: the user's to settle
                pool.shutdown(wait=False, cancel_futures=True)  # no new run starts; those running finish and save
                sys.exit(f"learning.py: error: {name}: {error}")
            if args.archive:
                _archive(done, args.section)
            last = done[name]["points"][-1]
            print(f"{name}: held-out success {last['success']:.3f} after {last['rollouts']} rollouts, "
                  f"{done[name]['seconds']:.0f} s", file=sys.stderr, flush=True)
    return {name: done[name] for name in runs}


def _one_run(name: str, label: str, spec: Any, setup: Any, workdir: Path, extend_from: Path | None = None
             ) -> dict[str, Any]:
    from tracec.trace_rl.experiments.learning_curve import learning_curve, start_run_folder
    from tracec.trace_rl.grpo.run_folder import checkpoint_iteration

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    out, key = workdir / "runs" / name, _spec_key(spec, setup.family)
    # a shorter run's checkpoints, points and CPU ledger are this run's first iterations
    shorter = _shorter_run(extend_from / "runs" / name, key) if extend_from is not None else None
    checkpoint = start_run_folder(out, key, continue_from=shorter)
    resume = checkpoint is not None
    # CPU seconds spent by the end of each iteration, kept in the run folder: a resumed run adds what it spent up
    # to the checkpoint it resumes from (the work after it, redone, counts once)
    ledger = out / "cpu_seconds.json"
    spent = json.loads(ledger.read_text(encoding="utf-8")) if resume and ledger.is_file() else {}
    before = float(spent.get(str(checkpoint_iteration(checkpoint)), 0.0)) if checkpoint else 0.0
    started = time.process_time()

    def account(metrics: dict[str, Any]) -> None:
        spent[str(metrics["iteration"])] = before + time.process_time() - started
        write_atomic(ledger, [json.dumps(spent)])

    curve = learning_curve(setup, spec, out, resume=resume, on_iteration=account)
    result = {"name": name, "label": label, "spec": key, "points": [asdict(p) for p in curve.points],
              "constant_fraction": curve.constant_fraction(), "seconds": curve.seconds,
              "cpu_s": before + time.process_time() - started, "cpu_s_by_iteration": spent,
              "train": [{k: m.get(k) for k in TRAIN_METRICS} for m in curve.train_metrics]}
    saved = workdir / "curves" / f"{name}.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(saved)
    return result


def prefix_curve(curve: dict[str, Any], key: dict[str, Any]) -> dict[str, Any] | None:
    """The run of `key` read off `curve`, a longer run of the same settings and seed, or None: with a constant rate
    a run's first iterations do not depend on how many follow (`--extend-from` relies on the same), so its curve up to
    `key`'s iterations is the shorter run's. Its wall and total CPU seconds were not measured apart (None); its
    training CPU seconds are the longer run's ledger up to that iteration (`training_cpu_s`)."""
    wants, every = _setting(key, "iterations"), _setting(curve["spec"], "eval_every")
    ledger = curve.get("cpu_s_by_iteration", {})
    if not _same_but_iterations(curve["spec"], key) or _setting(curve["spec"], "iterations") <= wants or \
            wants % every or str(wants) not in ledger:
        return None
    train = curve["train"][:wants]
    fractions = [m["constant_fraction"] for m in train if m.get("constant_fraction") is not None]
    return curve | {"spec": key, "points": curve["points"][:wants // every + 1], "train": train,
                    "constant_fraction": float(np.mean(fractions)) if fractions else float("nan"), "seconds": None,
                    "cpu_s": None, "cpu_s_by_iteration": {i: s for i, s in ledger.items() if int(i) <= wants}}


def _extended_policy(extend_from: Path, name: str) -> Path:
    policy = extend_from / name
    if not (policy / "config.json").is_file():
        sys.exit(f"learning.py: error: --extend-from {extend_from}: it holds no small policy {name} (no runs of this "
                 "family and width were made there)")
    return policy


def _shorter_run(folder: Path, key: dict[str, Any]) -> Path | None:
    """`folder`, if it holds a run of `key` in all but fewer iterations that reached its last one."""
    from tracec.trace_rl.grpo.run_folder import checkpoint_iteration, latest_checkpoint

    marker = folder / "spec.json"
    if not marker.is_file():
        return None
    saved = json.loads(marker.read_text(encoding="utf-8"))
    had, wants = _setting(saved, "iterations"), _setting(key, "iterations")
    done = latest_checkpoint(folder)
    finished = done is not None and checkpoint_iteration(done) == had
    return folder if _same_but_iterations(saved, key) and finished and had < wants else None


def _setting(key: dict[str, Any], name: str) -> Any:
    """A run key's setting, RunSpec's default where the key leaves it out (a key holds only what differs)."""
    from tracec.trace_rl.experiments.learning_curve import RunSpec

    return key[name] if name in key else next(f.default for f in fields(RunSpec) if f.name == name)


def _same_but_iterations(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "iterations"} == {k: v for k, v in b.items() if k != "iterations"}


def _by_label(curves: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for curve in curves.values():
        grouped.setdefault(curve["label"], []).append(curve)
    # in seed order: the seed-paired metric pairs the i-th run of one method with the i-th of another
    return {label: sorted(runs, key=lambda run: int(run["spec"].get("seed", 0))) for label, runs in grouped.items()}


def against_sparse_grpo(rollouts: list[int], grpo: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """`other` minus sparse GRPO (each (seeds, points, games, episodes) wins over `rollouts`) at a quarter, half and
    all of the budget and in area, and `other`'s rollouts to reach half and all of GRPO's final, on the seeds both
    ran."""
    grpo, other = seeds_both_ran(grpo, other)
    points = len(rollouts) - 1
    entry: dict[str, Any] = {f"at {rollouts[k]}": str(paired_difference(grpo[:, k], other[:, k]))
                             for k in sorted({max(1, points // 4), max(1, points // 2), points})}
    entry["area"] = str(paired_auc(rollouts, grpo, other))
    entry["seed-paired area"] = str(seed_paired_area(rollouts, grpo, other))  # the pre-registered primary
    for share in (0.5, 1.0):
        ratio, grpo_seeds, other_seeds = reach_ratio(rollouts, grpo, other, share=share)
        entry[f"reach {share:.0%}"] = {"ratio": f"{ratio.estimate:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]",
                                       "grpo_per_seed": grpo_seeds, "per_seed": other_seeds}
    return entry


def against_full_trca(rollouts: list[int], trca: np.ndarray, other: np.ndarray) -> dict[str, str]:
    """`other` minus full TRCA at the budget and in area (each (seeds, points, games, episodes) wins), on the seeds
    both ran."""
    trca, other = seeds_both_ran(trca, other)
    return {"final": str(paired_difference(trca[:, -1], other[:, -1])),
            "area": str(paired_auc(rollouts, trca, other)),
            "seed-paired area": str(seed_paired_area(rollouts, trca, other))}


def _summarize(curves: dict[str, dict[str, Any]], gate: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from tracec.trace_rl.experiments.demo import trust_region_summary

    grouped = _by_label(curves)
    methods = {}
    for label, runs in grouped.items():
        wins, greedy = wins_array(runs), wins_array(runs, "greedy_wins")
        steps = [step for run in runs for m in run["train"] for step in m["steps"]]
        methods[label] = {
            "seeds": len(runs), "rollouts": [p["rollouts"] for p in runs[0]["points"]],
            "success": [success_interval(wins[:, k]).level() for k in range(wins.shape[1])],
            "success_mean": wins.mean(axis=(0, 2, 3)).round(4).tolist(),
            "greedy_mean": greedy.mean(axis=(0, 2, 3)).round(4).tolist(),
            "per_seed_final": wins[:, -1].mean(axis=(1, 2)).round(4).tolist(),
            "train_success_last4": float(np.mean([m["success_rate"] for run in runs for m in run["train"][-4:]])),
            "constant_fraction": float(np.mean([r["constant_fraction"] for r in runs])),
            "ratio_p99_max": max((s["ratio_p99"] for s in steps), default=1.0),
            "ratio_p99_median": float(np.median([s["ratio_p99"] for s in steps if s["ratio_p99"] != 1.0] or [1.0])),
            "trust_region": trust_region_summary([m for run in runs for m in run["train"]]),
            "cpu_s": float(sum(training_cpu_s(r) for r in runs))}
    comparison: dict[str, Any] = {}
    if "sparse GRPO" in grouped:
        grpo = wins_array(grouped["sparse GRPO"])
        rollouts = methods["sparse GRPO"]["rollouts"]
        for label in [k for k in grouped if k != "sparse GRPO"]:
            if methods[label]["rollouts"][:len(rollouts)] != rollouts:
                continue  # evaluated at other points: nothing to pair
            other = wins_array(grouped[label])[:, :len(rollouts)]  # a longer run over the common budget
            comparison[label] = against_sparse_grpo(rollouts, grpo, other)
    ablated: dict[str, Any] = {}  # each ablation against full TRCA: what removing its component costs
    if "GRPO + TRCA" in grouped:
        trca = wins_array(grouped["GRPO + TRCA"])
        rollouts = methods["GRPO + TRCA"]["rollouts"]
        against = [k for k in grouped if k.startswith("TRCA,") or k in ("shaped GRPO", "GiGPO")]  # the mechanism
        for label in [k for k in against if methods[k]["rollouts"] == rollouts]:
            ablated[label] = against_full_trca(rollouts, trca, wins_array(grouped[label]))
    cloned = np.array(gate["cloned"]["wins"], dtype=float)[None]
    prior = np.array(gate["verb_prior"]["wins"], dtype=float)[None]
    untrained = np.array(gate["untrained"]["wins"], dtype=float)[None]
    gate_summary = {"untrained": success_interval(untrained).level(), "untrained_greedy": gate["untrained"]["greedy"],
                    "verb_prior": success_interval(prior).level(), "cloned": success_interval(cloned).level(),
                    "cloned_greedy": gate["cloned"]["greedy"], "cloned_losses": gate["cloned"]["losses"]}
    return {"settings": vars(args) | {"workdir": str(args.workdir)}, "gate": gate_summary, "methods": methods,
            "comparison": comparison, "ablations": ablated, "preregistered": analysis(grouped),
            "runs": {k: {kk: v[kk] for kk in ("label", "seconds", "cpu_s")} for k, v in curves.items()}}


def _diagnostics(setup: Any) -> dict[str, Any]:
    """How the rubric sees the training games: the walkthrough's steps it rewards, and returns of good and random
    play."""
    import numpy as np
    from tracec.runtime.facts.trajectories.jsonl import IN_MEMORY, episode_from_record
    from tracec.runtime.scoring import RubricScorer
    from tracec.trace_rl.envs.agent import run_episode
    from tracec.trace_rl.envs.textworld.agents import RandomAgent, WalkthroughAgent
    from tracec.trace_rl.envs.textworld.family import FamilyEnvironment

    scorer = RubricScorer.from_file(setup.rubric)
    categories = [op.category for op in scorer.compiled.operators]
    env = FamilyEnvironment(setup.family, setup.games, list_commands=False)
    walk, random, on_plan = [], [], []  # on_plan: per random step, was it the walkthrough's next command
    try:
        for seed in setup.family.train_seeds:
            walk.append(run_episode(env, WalkthroughAgent(env), seed, setup.family.max_turns, episode=f"w{seed}"))
            for i in range(8):  # a group of 8 random players a game, as a training group
                agent = _PlanMarkingAgent(RandomAgent(env, seed=i), env)
                random.append(run_episode(env, agent, seed, setup.family.max_turns, episode=f"r{seed}.{i}"))
                on_plan += agent.on_plan
    finally:
        env.close()
    random_result = scorer.score([episode_from_record(r, IN_MEMORY) for r in random])
    a_trca, plan = random_result.rewards.A, np.array(on_plan, dtype=bool)
    a_grpo = _grpo_step_advantages(random, random_result.batch.episode_offsets)
    credit = {"random_steps": len(plan), "on_plan_share": float(plan.mean()),
              "trca_nonzero_share": float((np.abs(a_trca) > 1e-9).mean()),
              "grpo_nonzero_share": float((np.abs(a_grpo) > 1e-9).mean()),
              "trca_mean_A_on_plan": float(a_trca[plan].mean()), "trca_mean_A_off_plan": float(a_trca[~plan].mean()),
              "grpo_mean_A_on_plan": float(a_grpo[plan].mean()), "grpo_mean_A_off_plan": float(a_grpo[~plan].mean()),
              "trca_mean_abs_A": float(np.abs(a_trca).mean()), "grpo_mean_abs_A": float(np.abs(a_grpo).mean())}
    result = scorer.score([episode_from_record(r, IN_MEMORY) for r in walk + random])
    offsets, fired = result.batch.episode_offsets, result.fired
    positive = np.array([c != "invalidity" for c in categories])
    walk_steps = fired[: offsets[len(walk)]]
    returns = result.episode_returns()
    coverage = {op.name: int(sum(fired[offsets[e]:offsets[e + 1], j].any() for e in range(len(walk))))
                for j, op in enumerate(scorer.compiled.operators)}
    return {"walkthrough_games": len(walk),
            "walkthrough_success": float(np.mean([w["success"] for w in walk])),
            "walkthrough_steps_rewarded": float((walk_steps[:, positive].sum(axis=1) > 0).mean()),
            "walkthrough_steps_penalized": float((walk_steps[:, ~positive].sum(axis=1) > 0).mean()),
            "walkthrough_games_per_operator": coverage,
            "return_walkthrough": float(np.mean(returns[: len(walk)])),
            "return_random": float(np.mean(returns[len(walk):])),
            "random_success": float(np.mean([r["success"] for r in random])), "credit_on_random_play": credit}


class _PlanMarkingAgent:
    """An agent that notes, for each command it plays, whether it is the next command of TextWorld's winning plan."""

    def __init__(self, inner: Any, env: Any) -> None:
        self.inner, self.env, self.on_plan = inner, env, list[bool]()

    def act(self, messages: Any) -> str:
        command = self.inner.act(messages)
        plan = self.env.policy_commands
        self.on_plan.append(bool(plan) and command == plan[0])
        return str(command)


def _grpo_step_advantages(records: list[dict[str, Any]], offsets: Any) -> Any:
    """Sparse GRPO's advantage of each step: its episode's success, normalised in its group of 8 (one game)."""
    import numpy as np

    out = np.zeros(int(offsets[-1]))
    for start in range(0, len(records), 8):
        wins = np.array([float(r["success"]) for r in records[start:start + 8]])
        advantage = (wins - wins.mean()) / (wins.std() + 1e-6) if wins.std() > 1e-9 else np.zeros_like(wins)
        for member, value in enumerate(advantage):
            e = start + member
            out[offsets[e]:offsets[e + 1]] = value
    return out


def _plots(curves: dict[str, dict[str, Any]], workdir: Path) -> list[Path]:
    from tracec.trace_rl.experiments.learning_curve import Curve, CurvePoint, RunSpec, plot_curves

    def as_curve(run: dict[str, Any]) -> Curve:
        spec = RunSpec(method=run["spec"]["method"], model=run["spec"]["model"], rubric=Path(run["spec"]["rubric"]))
        return Curve(spec=spec, points=[CurvePoint(**{**p, "wins": (), "greedy_wins": ()}) for p in run["points"]])

    grouped = {label: [as_curve(r) for r in runs] for label, runs in _by_label(curves).items()}
    main_labels = [label for _, label, _ in METHODS] + [ORACLE[1], *(v[1] for v in GATE_VARIANTS)]
    figures = [plot_curves({k: grouped[k] for k in main_labels if k in grouped}, workdir / "learning.png",
                           title="small policy: held-out success (mean, min-max over seeds)")]
    ablations = [k for k in grouped if k.startswith("TRCA,")]
    if ablations:
        figures.append(plot_curves({k: grouped[k] for k in ["GRPO + TRCA", *ablations] if k in grouped},
                                   workdir / "learning_ablations.png", title="TRCA ablations: held-out success"))
    return figures


def _report(summary: dict[str, Any], args: argparse.Namespace) -> str:
    """The section's Markdown: the gate, the curves with intervals, the comparison, the trust region."""
    g = summary["gate"]
    lines = [(f"Family: {args.train_games} training games, {args.eval_games} held-out games (quests of "
             f"{min(summary['quest_lengths'])}-{max(summary['quest_lengths'])} steps, "
             f"{summary['max_turns']} turns); small policy hidden {args.hidden}, {args.layers} layers, LoRA r16 on "
             "every linear layer; "
             f"{args.iterations} iterations of {args.groups} x {args.group_size} episodes "
             f"({args.iterations * args.groups * args.group_size} rollouts a run), lr {_rates_text(args)}, clip eps "
             f"{args.clip_eps:g}, target KL {args.target_kl:g}, 2 mini-batches; command-level loss. Each point: "
             f"{args.eval_games} held-out games x {args.eval_episodes} sampled episodes (and one greedy episode a "
             "game); intervals are 95% bootstrap over seeds and games."), "",
             "**Gate** (held-out success): untrained " + g["untrained"] + f" (greedy {g['untrained_greedy']:.3f}); "
             "state-blind verb prior " + g["verb_prior"] + "; behaviour cloning on the training walkthroughs "
             + g["cloned"] + f" (greedy {g['cloned_greedy']:.3f}, final loss {g['cloned_losses'][-1]:.3f})."]
    oracle = summary["methods"].get(ORACLE[1])
    if oracle:
        budget = args.iterations * args.groups * args.group_size
        at = oracle["rollouts"].index(budget)
        lines[-1] += (f" Oracle credit at the same budget: {oracle['success'][at]} "
                      f"(greedy {oracle['greedy_mean'][at]:.3f})")
        lines[-1] += (f"; at its own budget of {oracle['rollouts'][-1]} rollouts: {oracle['success'][-1]} "
                      f"(greedy {oracle['greedy_mean'][-1]:.3f})." if at < len(oracle["rollouts"]) - 1 else ".")
    for _, label, _ in GATE_VARIANTS:
        if variant := summary["methods"].get(label):
            lines[-1] += (f" {label.removesuffix(' (gate)').capitalize()} at the same budget: {variant['success'][-1]} "
                          f"(greedy {variant['greedy_mean'][-1]:.3f}).")
    rows = [[label, m["seeds"], " ".join(f"{x:.3f}" for x in m["success_mean"]), m["success"][-1],
             f"{m['greedy_mean'][-1]:.3f}", " ".join(f"{x:.2f}" for x in m["per_seed_final"]),
             f"{m['train_success_last4']:.3f}", f"{m['constant_fraction']:.0%}",
             f"{m['ratio_p99_median']:.2f} / {m['ratio_p99_max']:.2f}", f"{m['cpu_s'] / 60:.0f}"]
            for label, m in summary["methods"].items()]
    lines += ["", markdown_table(["method", "seeds", "held-out success (mean) at each evaluation", "final [95% CI]",
                                 "final greedy", "final per seed", "train success, last 4 it.", "constant groups",
                                 "ratio p99 median / max", "training CPU min"], rows)]
    if summary["comparison"]:
        lines += ["", ("**Against sparse GRPO** (difference in held-out success on the seeds both ran, paired over "
                      "games, 95% CI; reach: rollouts to reach 50% / 100% of GRPO's final mean success, as a ratio to "
                      "GRPO's own):"), ""]
        rows = []
        for label, c in summary["comparison"].items():
            points = [v for k, v in c.items() if k.startswith("at ")]
            rows.append([label, *points, c["area"], c.get("seed-paired area", "-"), c["reach 50%"]["ratio"],
                         c["reach 100%"]["ratio"]])
        at = [k for k in next(iter(summary["comparison"].values())) if k.startswith("at ")]
        lines.append(markdown_table(["method", *[f"diff {k}" for k in at], "diff in AUC",
                                     "seed-paired AUC diff (sign-flip p)", "reach ratio 50%", "reach ratio 100%"],
                                    rows))
    if summary.get("ablations"):
        lines += ["", ("**Against full TRCA** (an ablation, shaped GRPO or GiGPO minus GRPO + TRCA on the seeds both "
                       "ran, paired over games, 95% CI; a negative difference is what TRCA's removed or replaced part "
                       "was worth; shaped GRPO is TRCA without its step credit):"), ""]
        lines.append(markdown_table(["run", "diff at the budget", "diff in AUC", "seed-paired AUC diff (sign-flip p)"],
                                    [[label, a["final"], a["area"], a.get("seed-paired area", "-")]
                                     for label, a in summary["ablations"].items()]))
    if summary.get("preregistered"):
        lines += ["", report(summary["preregistered"])]
    lines += ["", "Trust region: " + "; ".join(f"{k}: {m['trust_region']}" for k, m in summary["methods"].items())]
    if summary.get("not_run"):
        lines += ["", "Not run (the experiment was stopped at the session's CPU budget): "
                  + ", ".join(summary["not_run"])]
    return "\n".join(lines)


def _rates_text(args: argparse.Namespace) -> str:
    by_credit = "".join(f", {credit} {rate:g}" for credit, rate in args.lr_by_method.items())
    return f"{args.lr:g}" + (f" (by credit{by_credit}; ablations and blind variants at their credit's)"
                             if by_credit else "")


def _slug(section: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", section.lower()).strip("-")


def archive_path(section: str) -> Path:
    """Where a section's runs are kept (`--archive`, `--record`): bench/learning_curves/<its slug>.json.gz."""
    return CURVE_ARCHIVE / f"{_slug(section)}.json.gz"


def _recorded_curves() -> list[dict[str, Any]]:
    """Every run a recorded section kept (bench/learning_curves/*.json.gz): a rerun with the same settings reuses
    them, so a later session adds seeds or methods without training the rest again."""
    curves = []
    for archive in sorted(CURVE_ARCHIVE.glob("*.json.gz")):
        curves += read_archive(archive)
    return curves


def _archive(curves: dict[str, dict[str, Any]], section: str) -> None:
    """`curves` into the section's archive, merged by name with what it holds: a run kept there is reused by a later
    session or clone (`_recorded_curves`) whose workdir has gone."""
    path = archive_path(section)
    kept = {c["name"]: c for c in read_archive(path)} if path.is_file() else {}
    _write_archive(path, kept | curves)


def _write_archive(path: Path, curves: dict[str, dict[str, Any]]) -> None:
    with atomic_open(path, "wb") as archive:
        archive.write(gzip.compress(json.dumps(list(curves.values()), separators=(",", ":")).encode(), mtime=0))


def _record(summary: dict[str, Any], curves: dict[str, dict[str, Any]], figures: list[Path],
            args: argparse.Namespace) -> None:
    import shutil

    bench = Path(__file__).resolve().parent
    slug, names = _slug(args.section), []
    for figure in figures:  # learning.png -> <section>.png, learning_ablations.png -> <section>_ablations.png
        name = slug + figure.name.removeprefix("learning")
        shutil.copyfile(figure, bench / name)
        names.append(name)
    _write_archive(archive_path(args.section), curves)
    d = summary["diagnostics"]
    body = (_report(summary, args) + f"\n\nRubric diagnostics on the {d['walkthrough_games']} training games: the "
            f"walkthrough wins {d['walkthrough_success']:.0%}; {d['walkthrough_steps_rewarded']:.0%} of its steps fire "
            f"a positive operator, {d['walkthrough_steps_penalized']:.0%} an invalidity one; TRCA return "
            f"{d['return_walkthrough']:.3f} (walkthrough) vs {d['return_random']:.3f} (random play, which wins "
            f"{d['random_success']:.0%}). " + _credit_text(d["credit_on_random_play"]) + "\n\n"
            + " ".join(f"![{n}]({n})" for n in names)
            + ("\n\n" + args.notes.read_text(encoding="utf-8").strip() if args.notes else ""))
    record(args.section, body, reproduce_command(args))


NOT_SETTINGS = ("record", "archive", "workdir", "notes", "saved_only")  # where the runs go, not what they are


def reproduce_command(args: argparse.Namespace) -> str:
    """The command that makes these runs again: every setting as the flag that reads it."""
    flags = []
    for key, value in vars(args).items():
        if key in NOT_SETTINGS or value is False or value is None or value == {}:
            continue
        if isinstance(value, dict):  # --lr-by-method, in the syntax it reads
            text = ",".join(f"{credit}={rate}" for credit, rate in value.items())  # str: the exact float
        else:
            text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)  # --only, ...
        flags.append(f"--{key.replace('_', '-')}" + ("" if value is True else f" {shlex.quote(text)}"))
    return "python bench/learning.py " + " ".join(flags) + " --record"


def _credit_text(c: dict[str, Any]) -> str:
    return (f"Credit on cold-start play ({c['random_steps']} steps of random admissible commands, 8 players a training "
            f"game, scored as training groups): {c['on_plan_share']:.0%} of the steps are the winning plan's next "
            f"command. Steps with a non-zero advantage: TRCA {c['trca_nonzero_share']:.0%}, sparse GRPO "
            f"{c['grpo_nonzero_share']:.0%}. Mean advantage of on-plan vs other steps: TRCA "
            f"{c['trca_mean_A_on_plan']:+.3f} vs {c['trca_mean_A_off_plan']:+.3f}, "
            f"GRPO {c['grpo_mean_A_on_plan']:+.3f} "
            f"vs {c['grpo_mean_A_off_plan']:+.3f}; mean |A|: TRCA {c['trca_mean_abs_A']:.3f}, GRPO "
            f"{c['grpo_mean_abs_A']:.3f}.")


if __name__ == "__main__":
    main()
