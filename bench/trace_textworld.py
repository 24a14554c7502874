"""TRACE on the TextWorld family, every condition of issue 34's table on the same held-out games.

    python bench/trace_textworld.py --split validation --seeds 1     # the choices (base agent, environments)
    python bench/trace_textworld.py --split test --seeds 5 --record  # the table, read once

1. The target: the 2-4-step quests in 8 turns (256 training games), the small policy of `bench/learning.py`.
2. The base agent: the small policy after `--base-iterations` of sparse GRPO on the training games, folded into its
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
Everything is saved in `--workdir` and reused by a rerun; a killed training run resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record
from tracec.atomic import write_atomic

SPLITS = {"validation": 200_000, "test": 300_000}
POOL_FIRST = 400_000  # capability environments' games: a range no target split uses


def main() -> None:
    args = _arguments()
    from tracec.quiet import quiet_libraries

    quiet_libraries()
    began = time.perf_counter()
    work = _Work(args)
    table = work.table()
    text = _report(work, table)
    print(text)
    write_atomic(args.workdir / f"table-{args.split}.md", [text])
    if args.record:
        record(f"trace textworld {args.split}", text, "python " + " ".join(sys.argv))
    print(f"{time.perf_counter() - began:.0f} s", file=sys.stderr)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/trace-textworld"))
    parser.add_argument("--split", choices=tuple(SPLITS), default="validation")
    parser.add_argument("--eval-games", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=8)
    parser.add_argument("--train-games", type=int, default=256)
    parser.add_argument("--base-iterations", type=int, default=8, help="the base agent's GRPO iterations (64 "
                        "rollouts each)")
    parser.add_argument("--collection-games", type=int, default=64)
    parser.add_argument("--label-runs", type=int, default=5)
    parser.add_argument("--label-episodes", type=int, default=2)
    parser.add_argument("--rho", type=float, default=0.10)
    parser.add_argument("--delta", type=float, default=0.50, help="TRACE's 0.20 keeps 6 of 7 here")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--pool-games", type=int, default=384)
    parser.add_argument("--pool-lengths", type=lambda text: tuple(int(n) for n in text.split(",")), default=(1, 2))
    parser.add_argument("--env-games", type=int, default=48)
    parser.add_argument("--env-turns", type=int, default=4, help="turns an episode of a capability environment may "
                        "take (how hard it is: chosen on the validation split to fall in TRACE's band)")
    parser.add_argument("--adapter-iterations", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    return parser.parse_args()


class _Work:
    """The experiment's stages, each saved in the workdir and read back by a rerun."""

    def __init__(self, args: argparse.Namespace) -> None:
        from tracec.trace_rl.envs.textworld.family import TaskFamily
        from tracec.trace_rl.experiments.learning_curve import RunSpec, prepare_setup
        from tracec.trace_rl.experiments.trace_conditions import save_base_agent

        self.args = args
        first = SPLITS[args.split]
        family = TaskFamily(quest_lengths=(2, 3, 4), max_turns=8, train_seeds=tuple(range(args.train_games)),
                            eval_seeds=tuple(range(first, first + args.eval_games)))
        self.setup = prepare_setup(args.workdir, family, hidden=128, layers=2)
        common = {"lr": args.lr, "clip_eps": 0.28, "target_kl": 0.05, "eval_episodes": args.eval_episodes,
                  "threads": 1}
        base_spec = RunSpec(method="grpo", model=str(self.setup.small_policy), iterations=args.base_iterations,
                            eval_every=args.base_iterations, seed=0, **common)
        self.base = save_base_agent(self.setup, base_spec, args.workdir / f"base-agent-{args.base_iterations}")
        self.spec = replace(base_spec, model=str(self.base), iterations=args.adapter_iterations,
                            eval_every=args.adapter_iterations)
        self.pool = replace(family, quest_lengths=args.pool_lengths, max_turns=args.env_turns,
                            train_seeds=tuple(range(POOL_FIRST, POOL_FIRST + args.pool_games)))
        self.folder = args.workdir / f"{self.base.name}-{args.split}"

    def table(self) -> dict[str, Any]:
        from tracec.trace_rl.experiments.learning_curve import EVAL_STREAM
        from tracec.trace_rl.experiments.trace_conditions import labelling_runs, play_adapter
        from tracec.trace_rl.experiments.trace_family import CAPABILITIES, DESCRIPTIONS, seeds_needing
        from tracec.trace_rl.policy.model import Policy
        from tracec.trace_rl.targeting.analysis.runs import read_run
        from tracec.trace_rl.targeting.analysis.select import Thresholds, selected, summarize

        args, setup = self.args, self.setup
        policy = Policy.load(str(self.base), self.spec.lora, seed=0)
        base = self._cached("base", lambda: play_adapter(self.base, None, setup, self.spec, setup.family.eval_seeds,
                                                         stream=EVAL_STREAM).tolist())
        collection = setup.family.train_seeds[:args.collection_games]
        runs = labelling_runs(policy, setup, self.spec, collection, args.workdir / f"{self.base.name}-runs",
                              runs=args.label_runs, episodes=args.label_episodes)
        thresholds = Thresholds(rho=args.rho, delta=args.delta, k=args.k)
        summaries = summarize([read_run(path) for path in runs], thresholds, DESCRIPTIONS)
        kept = [s.skill for s in selected(summaries)]
        # the adapter selection argues against most: the capability it did not keep with the smallest contrast
        left = sorted((s for s in summaries if s.skill not in kept), key=lambda s: s.mean_delta)
        unselected = left[0].skill if left else None
        games = self.pool.prepare(self.pool.train_seeds, setup.games)
        envs = {name: seeds_needing(self.pool, games, name)[:args.env_games] for name in CAPABILITIES}
        calibration = self._cached(f"calibration-{args.env_turns}-turns", lambda: self._calibrate(policy, envs))
        trained = self._train_all(kept, unselected, envs)
        conditions = self._conditions(policy, np.array(base), kept, unselected, trained) if args.seeds else {}
        return {"base": base, "summaries": [s.record() for s in summaries], "kept": kept,
                "unselected": unselected, "envs": {k: len(v) for k, v in envs.items()}, "calibration": calibration,
                "trained": trained, "runs": [str(p) for p in runs], "conditions": conditions}

    def _conditions(self, policy: Any, base: np.ndarray, kept: list[str], unselected: str | None,
                    trained: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every condition's wins (seeds, games, episodes) on the split's games."""
        from tracec.trace_rl.experiments.learning_curve import EVAL_STREAM
        from tracec.trace_rl.experiments.trace_conditions import (
            NeedProbe,
            opening_features,
            oracle_route,
            play_adapter,
            route,
            routed_wins,
        )
        from tracec.trace_rl.experiments.trace_family import gold_plan, needs
        from tracec.trace_rl.targeting.merging import merge_linear, merge_ties

        setup, seeds = self.setup, range(self.args.first_seed, self.args.first_seed + self.args.seeds)
        known = setup.family.train_seeds  # the probe learns from the training tasks' gold needs, never the split's
        plans = {s: gold_plan(setup.family.game_file(s, setup.games)) for s in (*known, *setup.family.eval_seeds)}
        probe = NeedProbe.fit(opening_features(policy, setup, self.spec, known),
                              [needs(plans[s]) for s in known], kept) if kept else None
        routes = route(probe.probabilities(opening_features(policy, setup, self.spec, setup.family.eval_seeds)),
                       kept, kept) if probe else [None] * len(setup.family.eval_seeds)
        oracle = oracle_route([plans[s] for s in setup.family.eval_seeds], kept, needs)
        write_atomic(self.folder / "results" / "routes.json", [json.dumps({"routed": routes, "oracle": oracle})])
        rows: dict[str, list[np.ndarray]] = {}

        def add(name: str, wins: Any) -> None:
            rows.setdefault(name, []).append(np.asarray(wins, dtype=float))
        for seed in seeds:
            add("base", base)
            add("GRPO on the target", trained[f"grpo-target-s{seed}"]["wins"])
            per_adapter = {None: base} | {name: np.array(trained[f"adapter-{name}-s{seed}"]["wins"]) for name in kept}
            for name in kept:
                add(f"adapter {name} alone", per_adapter[name])
            if unselected:
                add(f"adapter {unselected} alone (not selected)", trained[f"adapter-{unselected}-s{seed}"]["wins"])
            if kept:
                add("mixture (multi-capability GRPO)", trained[f"mixture-s{seed}"]["wins"])
                folders = [Path(trained[f"adapter-{name}-s{seed}"]["adapter"]) for name in kept]
                for method, merge in (("linear", merge_linear), ("ties", merge_ties)):
                    out = self.folder / "merges" / f"{method}-s{seed}"

                    def merged(merge: Any = merge, out: Path = out, folders: list[Path] = folders) -> list[Any]:
                        merge(folders, out)
                        return play_adapter(self.base, out, setup, self.spec, setup.family.eval_seeds,
                                            stream=EVAL_STREAM).tolist()
                    add(f"merge {method}", self._cached(f"merge-{method}-s{seed}", merged))
                add("TRACE routed", routed_wins(per_adapter, routes))
                add("oracle router", routed_wins(per_adapter, oracle))
        return {name: np.stack(values) for name, values in rows.items()}

    def _calibrate(self, policy: Any, envs: dict[str, list[int]]) -> dict[str, Any]:
        """TRACE's calibration of each capability environment with the base agent: 8 episodes a game."""
        from tracec.trace_rl.experiments.learning_curve import play
        from tracec.trace_rl.experiments.trace_conditions import games_environment
        from tracec.trace_rl.targeting.synth.calibration import calibrate
        from tracec.trace_rl.targeting.synth.rollouts import Rollout

        report = {}
        for name, seeds in envs.items():
            if not seeds:
                continue
            played = play(policy, self.setup, self.spec, range(len(seeds)), episodes=8, stream=7,
                          make_env=games_environment(self.pool, self.setup.games, seeds))
            result = calibrate([Rollout(seed=e.seed, sample=e.member, reward=e.reward, success=e.success,
                                        steps=e.turns, record=e.trajectory) for e in played])
            report[name] = {"success": result.metrics["success_rate"], "ok": result.ok,
                            "failures": list(result.failures)}
        return report

    def _train_all(self, kept: list[str], unselected: str | None, envs: dict[str, list[int]]) -> dict[str, Any]:
        args = self.args
        budget = max(len(kept), 1) * args.adapter_iterations
        jobs: dict[str, tuple[str, list[int], int]] = {}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for name in [*kept, *([unselected] if unselected else [])]:
                jobs[f"adapter-{name}-s{seed}"] = ("pool", envs[name], args.adapter_iterations)
            mixture = [s for group in zip(*(envs[name] for name in kept)) for s in group]
            if mixture:
                jobs[f"mixture-s{seed}"] = ("pool", mixture, budget)
            jobs[f"grpo-target-s{seed}"] = ("target", list(self.setup.family.train_seeds), budget)
        done = {name: json.loads(path.read_text()) for name in jobs
                if (path := self.folder / "results" / f"{name}.json").is_file()}
        todo = {name: job for name, job in jobs.items() if name not in done}
        print(f"{len(done)} trainings saved, {len(todo)} to run", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as workers:
            futures = {workers.submit(_train_and_play, self, name, *job): name for name, job in todo.items()}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                print(f"{futures[future]}: {np.mean(done[futures[future]]['wins']):.3f}", file=sys.stderr,
                      flush=True)
        return done

    def _cached(self, name: str, compute: Any) -> Any:
        path = self.folder / "results" / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text())
        value = compute()
        write_atomic(path, [json.dumps(value)])
        return value


def _train_and_play(work: _Work, name: str, where: str, seeds: list[int], iterations: int) -> dict[str, Any]:
    """Train one adapter (from `work`'s base agent), then play it on the split's games; saved as JSON."""
    from tracec.trace_rl.experiments.learning_curve import EVAL_STREAM
    from tracec.trace_rl.experiments.trace_conditions import play_adapter, train_on_games

    from tracec.quiet import quiet_libraries

    quiet_libraries()
    seed = int(name.rsplit("-s", 1)[1])
    spec = replace(work.spec, iterations=iterations, eval_every=iterations, seed=seed)
    family = work.pool if where == "pool" else work.setup.family
    started = time.perf_counter()
    adapter = train_on_games(spec, work.setup, family, seeds, work.folder / "runs" / name)
    wins = play_adapter(work.base, adapter, work.setup, spec, work.setup.family.eval_seeds, stream=EVAL_STREAM)
    value = {"adapter": str(adapter), "wins": wins.tolist(), "seconds": time.perf_counter() - started,
             "rollouts": iterations * spec.rollouts_per_iteration}
    write_atomic(work.folder / "results" / f"{name}.json", [json.dumps(value)])
    return value


def _report(work: _Work, table: dict[str, Any]) -> str:
    from tracec.trace_rl.experiments.learning_stats import paired_difference, sign_flip_test, success_interval

    lines = [(f"base agent: {work.base.name} (how: {work.base / 'base_agent.json'}), success on the "
             f"{work.args.split} games {np.mean(table['base']):.3f}"),
             "selection (mean coverage, mean Delta, runs passed): " +
             ", ".join(f"{s['skill']} {s['mean_cov']:.2f} {s['mean_delta']:+.2f} {s['n_runs_passed']}/"
                       f"{s['n_runs_total']}" for s in table["summaries"]),
             f"kept: {', '.join(table['kept']) or 'none'}; the adapter of a capability not kept: {table['unselected']}",
             f"capability environments (games; the base agent's success in {work.args.env_turns} turns; inside "
             "TRACE's bands): " + ", ".join(f"{k} {table['envs'][k]}; {v['success']:.2f}; "
                                            f"{'yes' if v['ok'] else 'no: ' + '; '.join(v['failures'])}"
                                            for k, v in table["calibration"].items())]
    conditions = table["conditions"]
    if not conditions:
        return "\n".join(lines)
    base, grpo = conditions["base"], conditions["GRPO on the target"]
    rows = []
    for name, wins in conditions.items():
        per_seed = wins.mean(axis=(1, 2)) - grpo.mean(axis=(1, 2))
        rows.append((name, str(success_interval(wins)), str(paired_difference(base, wins)),
                     str(paired_difference(grpo, wins)) if name != "GRPO on the target" else "",
                     str(sign_flip_test(per_seed)) if name != "GRPO on the target" else ""))
    header = ("condition", "success [95%]", "minus base", "minus GRPO on the target", "seed-paired vs GRPO")
    budget = {name: value["rollouts"] for name, value in table["trained"].items()}
    lines.append(f"rollouts a training run: {sorted(set(budget.values()))}; seeds {len(base)}; "
                 f"{base.shape[1]} games x {base.shape[2]} episodes a condition")
    return "\n".join(lines) + "\n\n" + markdown_table(header, rows)


if __name__ == "__main__":
    main()
