"""TRACE on a TextWorld family end to end: base agent, labelled collections, selection, capability environments,
adapters and every condition of the comparison on the family's held-out games.

    experiment = TraceExperiment(setup, TraceBudget(seeds=5), workdir, split="test")
    table = experiment.run()                  # every stage saved in the workdir and read back by a rerun
    header, rows = table_rows(table)          # each condition with its intervals against base and GRPO

The stages (docs/trace.md, "TRACE measured"): the base agent (`trace_conditions.save_base_agent`, or a given
adapter folded in); `label_runs` labelling runs of its own samples on the first training games; TRACE's selection;
capability environments from a pool of short quests (`pool`), calibrated with TRACE's bands; for each seed an
adapter per selected capability and one for the capability selection argues against most (the smallest mean Delta
among those it did not keep), the mixture and GRPO on the target with the selected adapters' rollouts together, the
linear and TIES merges; routed (the need probe) and oracle-routed conditions assembled from the adapters' own
episodes. Training runs go `jobs` at a time in spawned processes, one torch thread each; a killed one resumes from
its last checkpoint.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tracec.trace_rl.envs.textworld.family import TaskFamily
from tracec.trace_rl.experiments.learning_curve import EVAL_STREAM, RunSpec, Setup, play
from tracec.trace_rl.experiments.learning_stats import paired_difference, sign_flip_test, success_interval
from tracec.trace_rl.experiments.trace_conditions import (
    NeedProbe,
    games_environment,
    labelling_runs,
    opening_features,
    oracle_route,
    play_adapter,
    route,
    routed_wins,
    save_base_agent,
    train_on_games,
)
from tracec.trace_rl.experiments.trace_family import CAPABILITIES, DESCRIPTIONS, gold_plan, needs, seeds_needing
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.analysis.runs import read_run
from tracec.trace_rl.targeting.analysis.select import Thresholds, selected, summarize
from tracec.trace_rl.targeting.merging import merge_linear, merge_ties
from tracec.trace_rl.targeting.synth.calibration import calibrate
from tracec.trace_rl.targeting.synth.rollouts import Rollout

from tracec.atomic import write_atomic
from tracec.config_io import ConfigError
from tracec.quiet import quiet_libraries
from tracec.worker_pool import worker_pool

POOL_FIRST = 400_000  # capability environments' games: a range no target split uses
GRPO_TARGET = "GRPO on the target"


@dataclass(frozen=True, kw_only=True)
class TraceBudget:
    base_iterations: int = 8  # the base agent's sparse GRPO iterations on the training games
    collection_games: int = 64
    label_runs: int = 5
    label_episodes: int = 2
    rho: float = 0.10
    delta: float = 0.50  # TRACE's 0.20 keeps 6 of 7 here (docs/trace.md)
    k: int = 4
    pool_games: int = 384
    pool_lengths: tuple[int, ...] = (1, 2)
    env_games: int = 48
    env_turns: int = 4  # calibration put 1-2-step quests in 8 turns above TRACE's band
    adapter_iterations: int = 8
    adapter_method: str = "grpo"  # the capability adapters': TRACE's GRPO, or trca (setup.rubric's step credit)
    groups: int = 8
    group_size: int = 8
    lr: float = 2e-3
    eval_episodes: int = 8
    calibration_episodes: int = 8
    seeds: int = 5
    first_seed: int = 0
    jobs: int = 2
    model: str = ""  # the base agent's start: the setup's small policy, or a model's name or checkpoint folder
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.adapter_method not in ("grpo", "trca"):
            raise ValueError(f"TraceBudget: adapter_method={self.adapter_method!r} must be grpo (TRACE's) or trca")


class TraceExperiment:
    """The experiment's stages on `setup` (its family's training games are the target's, its held-out games the
    split's), saved under `workdir`: the base agent in `base-agent-N` (N its iterations), the labelling runs beside
    it, the rest in `base-agent-N-<split>`. `base_adapter`: fold this adapter folder into `setup.small_policy`
    instead of training one (saved in `base-agent`)."""

    def __init__(self, setup: Setup, budget: TraceBudget, workdir: Path, *, split: str,
                 base_adapter: Path | None = None) -> None:
        self.setup, self.budget = setup, budget
        base_spec = RunSpec(method="grpo", model=budget.model or str(setup.small_policy),
                            iterations=max(budget.base_iterations, 1),
                            eval_every=max(budget.base_iterations, 1), lr=budget.lr, clip_eps=0.28,
                            target_kl=0.05, eval_episodes=budget.eval_episodes, groups_per_batch=budget.groups,
                            group_size=budget.group_size, threads=1, device=budget.device, seed=0)
        name = "base-agent" if base_adapter else f"base-agent-{budget.base_iterations}"
        family = setup.family
        base_key = {"adapter": str(base_adapter)} if base_adapter else \
            _fields(budget, "model", "lr", "groups", "group_size")
        base_key |= {"quest_lengths": family.quest_lengths, "max_turns": family.max_turns,
                     "train_seeds": [family.train_seeds[0], len(family.train_seeds)]}
        check_stage(workdir / name, base_key)
        self.base = save_base_agent(setup, base_spec, workdir / name, adapter=base_adapter)
        self.spec = replace(base_spec, model=str(self.base), iterations=budget.adapter_iterations,
                            eval_every=budget.adapter_iterations)
        self.pool = capability_pool(family, budget)
        self.runs_folder = workdir / f"{self.base.name}-runs"
        check_stage(self.runs_folder, _fields(budget, "collection_games", "label_episodes"))
        self.calibration = workdir / f"{self.base.name}-calibration.json"
        # capability adapters trained with TRCA are other runs than GRPO's: their own folder
        method = "" if budget.adapter_method == "grpo" else f"-{budget.adapter_method}"
        self.folder = workdir / f"{self.base.name}-{split}{method}"
        every_field = [f for f in TraceBudget.__dataclass_fields__
                       if f not in ("seeds", "first_seed", "jobs", "device")]
        check_stage(self.folder, _fields(budget, *every_field) |
                    {"eval_seeds": [family.eval_seeds[0], len(family.eval_seeds)]})

    def run(self) -> dict[str, Any]:
        budget, setup = self.budget, self.setup
        policy = Policy.load(str(self.base), self.spec.lora, device=self.spec.device, seed=0)
        base = self._cached("base", lambda: play_adapter(self.base, None, setup, self.spec, setup.family.eval_seeds,
                                                         stream=EVAL_STREAM).tolist())
        runs = labelling_runs(policy, setup, self.spec, setup.family.train_seeds[:budget.collection_games],
                              self.runs_folder, runs=budget.label_runs, episodes=budget.label_episodes)
        summaries = summarize([read_run(path) for path in runs],
                              Thresholds(rho=budget.rho, delta=budget.delta, k=budget.k), DESCRIPTIONS)
        games = self.pool.prepare(self.pool.train_seeds, setup.games)
        envs = {name: seeds_needing(self.pool, games, name)[:budget.env_games] for name in CAPABILITIES}
        chosen = [s.skill for s in selected(summaries)]
        kept = [name for name in chosen if envs[name]]  # a capability no pool game needs has no environment
        left = sorted((s for s in summaries if s.skill not in chosen and envs[s.skill]), key=lambda s: s.mean_delta)
        unselected = left[0].skill if left else None
        calibration = self._calibration(policy, envs)
        trained = self._train_all(kept, unselected, envs)
        conditions = self._conditions(policy, np.array(base), kept, unselected, trained) if budget.seeds else {}
        return {"base": base, "summaries": [s.record() for s in summaries], "kept": kept,
                "without_environment": [name for name in chosen if name not in kept],
                "unselected": unselected, "envs": {k: len(v) for k, v in envs.items()}, "calibration": calibration,
                "trained": trained, "runs": [str(p) for p in runs], "conditions": conditions,
                "env_turns": budget.env_turns}

    def _calibration(self, policy: Policy, envs: dict[str, list[int]]) -> dict[str, Any]:
        """TRACE's calibration of each capability environment with the base agent, saved beside the base agent
        by the settings it depends on (the pool, the environments' games and turns): every split reads it."""
        key = _fields(self.budget, "pool_games", "pool_lengths", "env_games", "env_turns", "calibration_episodes")
        return saved_by_key(self.calibration, key, lambda: self._calibrate(policy, envs))

    def _calibrate(self, policy: Policy, envs: dict[str, list[int]]) -> dict[str, Any]:
        report = {}
        for name, seeds in envs.items():
            if seeds:
                played = play(policy, self.setup, self.spec, range(len(seeds)),
                              episodes=self.budget.calibration_episodes, stream=7,
                              make_env=games_environment(self.pool, self.setup.games, seeds))
                result = calibrate([Rollout(seed=e.seed, sample=e.member, reward=e.reward, success=e.success,
                                            steps=e.turns, record=e.trajectory) for e in played])
                report[name] = {"success": result.metrics["success_rate"], "ok": result.ok,
                                "failures": list(result.failures)}
        return report

    def _train_all(self, kept: list[str], unselected: str | None, envs: dict[str, list[int]]) -> dict[str, Any]:
        budget = self.budget
        together = max(len(kept), 1) * budget.adapter_iterations
        jobs: dict[str, tuple[str, list[int], int, str]] = {}  # where, games, iterations, method
        for seed in range(budget.first_seed, budget.first_seed + budget.seeds):
            for name in [*kept, *([unselected] if unselected else [])]:
                jobs[f"adapter-{name}-s{seed}"] = ("pool", envs[name], budget.adapter_iterations,
                                                   budget.adapter_method)
            mixture = [s for group in zip(*(envs[name] for name in kept)) for s in group]
            if mixture:  # the baselines stay GRPO, as in TRACE's comparison
                jobs[f"mixture-s{seed}"] = ("pool", mixture, together, "grpo")
            jobs[f"grpo-target-s{seed}"] = ("target", list(self.setup.family.train_seeds), together, "grpo")
        done = {name: json.loads(path.read_text()) for name in jobs
                if (path := self.folder / "results" / f"{name}.json").is_file()}
        todo = {name: job for name, job in jobs.items() if name not in done}
        print(f"  {len(done)} trainings saved, {len(todo)} to run", file=sys.stderr, flush=True)
        with worker_pool(budget.jobs) as workers:
            futures = {workers.submit(_train_and_play, self, name, *job): name for name, job in todo.items()}
            for future in as_completed(futures):
                name = futures[future]
                done[name] = future.result()
                print(f"  {name}: {np.mean(done[name]['wins']):.3f}", file=sys.stderr, flush=True)
        return done

    def _conditions(self, policy: Policy, base: np.ndarray, kept: list[str], unselected: str | None,
                    trained: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every condition's wins (seeds, games, episodes) on the held-out games."""
        setup, budget = self.setup, self.budget
        known, held_out = setup.family.train_seeds, setup.family.eval_seeds  # the probe never sees held-out needs
        plans = {s: gold_plan(setup.family.game_file(s, setup.games)) for s in (*known, *held_out)}
        probe = NeedProbe.fit(opening_features(policy, setup, self.spec, known),
                              [needs(plans[s]) for s in known], kept) if kept else None
        routes = route(probe.probabilities(opening_features(policy, setup, self.spec, held_out)), kept, kept) \
            if probe else [None] * len(held_out)
        oracle = oracle_route([plans[s] for s in held_out], kept, needs)
        write_atomic(self.folder / "results" / "routes.json", [json.dumps({"routed": routes, "oracle": oracle})])
        rows: dict[str, list[np.ndarray]] = {}

        def add(name: str, wins: Any) -> None:
            rows.setdefault(name, []).append(np.asarray(wins, dtype=float))
        for seed in range(budget.first_seed, budget.first_seed + budget.seeds):
            add("base", base)
            add(GRPO_TARGET, trained[f"grpo-target-s{seed}"]["wins"])
            per_adapter = {None: base} | {name: np.array(trained[f"adapter-{name}-s{seed}"]["wins"]) for name in kept}
            for name in kept:
                add(f"adapter {name} alone", per_adapter[name])
            if unselected:
                add(f"adapter {unselected} alone (not selected)", trained[f"adapter-{unselected}-s{seed}"]["wins"])
            if kept:
                add("mixture (multi-capability GRPO)", trained[f"mixture-s{seed}"]["wins"])
                folders = [Path(trained[f"adapter-{name}-s{seed}"]["adapter"]) for name in kept]
                for method in ("linear", "ties"):
                    add(f"merge {method}", self._cached(f"merge-{method}-s{seed}",
                                                        lambda m=method, f=folders, s=seed: self._merged(m, f, s)))
                add("TRACE routed", routed_wins(per_adapter, routes))
                add("oracle router", routed_wins(per_adapter, oracle))
        return {name: np.stack(values) for name, values in rows.items()}

    def _merged(self, method: str, folders: list[Path], seed: int) -> list[Any]:
        out = self.folder / "merges" / f"{method}-s{seed}"
        (merge_linear if method == "linear" else merge_ties)(folders, out)
        return play_adapter(self.base, out, self.setup, self.spec, self.setup.family.eval_seeds,
                            stream=EVAL_STREAM).tolist()

    def _cached(self, name: str, compute: Any) -> Any:
        path = self.folder / "results" / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
        value = compute()
        write_atomic(path, [json.dumps(value)])
        return value


def capability_pool(family: TaskFamily, budget: TraceBudget) -> TaskFamily:
    """The games the capability environments are drawn from: short quests in the same world, `budget.env_turns`
    turns, seeds from POOL_FIRST (no target split's)."""
    return replace(family, quest_lengths=budget.pool_lengths, max_turns=budget.env_turns,
                   train_seeds=tuple(range(POOL_FIRST, POOL_FIRST + budget.pool_games)))


def saved_by_key(path: Path, key: dict[str, Any], compute: Callable[[], Any]) -> Any:
    """The value saved in `path` (a JSON list of {key, value}) for the settings `key`, or `compute()`'s, added."""
    key = _as_saved(key)
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    if found := next((entry for entry in saved if entry["key"] == key), None):
        return found["value"]
    value = compute()
    write_atomic(path, [json.dumps([*saved, {"key": key, "value": value}])])
    return value


def check_stage(folder: Path, key: dict[str, Any]) -> None:
    """Refuse to reuse `folder`'s saved stages for other settings than they were made with (`folder/budget.json`,
    written by the first run); a rerun with the same settings reads them back."""
    key = _as_saved(key)
    path = folder / "budget.json"
    if not path.is_file():
        write_atomic(path, [json.dumps(key, indent=2)])
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    changed = sorted(name for name in {*saved, *key} if saved.get(name) != key.get(name))
    if changed:
        was = ", ".join(f"{name}={saved.get(name)}" for name in changed)
        now = ", ".join(f"{name}={key.get(name)}" for name in changed)
        raise ConfigError(f"{folder}: its stages were made with {was}; this run asks {now}: give another workdir, "
                          "or delete that folder to start it over")


def _fields(budget: TraceBudget, *names: str) -> dict[str, Any]:
    return {name: getattr(budget, name) for name in names}


def _as_saved(key: dict[str, Any]) -> dict[str, Any]:
    """`key` as JSON reads it back (tuples as lists), so that a saved key and a fresh one compare equal."""
    return json.loads(json.dumps(key))


def _train_and_play(experiment: TraceExperiment, name: str, where: str, seeds: list[int], iterations: int,
                    method: str) -> dict[str, Any]:
    """Train one adapter from the base agent with `method` (grpo, or trca with the setup's rubric), then play it on
    the held-out games; saved as JSON."""
    quiet_libraries()
    seed = int(name.rsplit("-s", 1)[1])
    spec = replace(experiment.spec, method=method, rubric=experiment.setup.rubric, iterations=iterations,
                   eval_every=iterations, seed=seed)
    family: TaskFamily = experiment.pool if where == "pool" else experiment.setup.family
    started = time.perf_counter()
    adapter = train_on_games(spec, experiment.setup, family, seeds, experiment.folder / "runs" / name)
    wins = play_adapter(experiment.base, adapter, experiment.setup, spec, experiment.setup.family.eval_seeds,
                        stream=EVAL_STREAM)
    value = {"adapter": str(adapter), "wins": wins.tolist(), "seconds": time.perf_counter() - started,
             "rollouts": iterations * spec.rollouts_per_iteration}
    write_atomic(experiment.folder / "results" / f"{name}.json", [json.dumps(value)])
    return value


def summary_lines(table: dict[str, Any]) -> list[str]:
    """What the stages before the table found: the base agent, selection, the environments' calibration."""
    return ["selection (mean coverage, mean Delta, runs passed): " +
            ", ".join(f"{s['skill']} {s['mean_cov']:.2f} {s['mean_delta']:+.2f} {s['n_runs_passed']}/"
                      f"{s['n_runs_total']}" for s in table["summaries"]),
            f"kept: {', '.join(table['kept']) or 'none'}; the adapter of a capability not kept: {table['unselected']}"
            + (f"; kept but no pool game needs it (no environment): {', '.join(table['without_environment'])}"
               if table["without_environment"] else ""),
            f"capability environments (games; the base agent's success in {table['env_turns']} turns; inside "
            "TRACE's bands): " + ", ".join(f"{k} {table['envs'][k]}; {v['success']:.2f}; "
                                           f"{'yes' if v['ok'] else 'no: ' + '; '.join(v['failures'])}"
                                           for k, v in table["calibration"].items())]


def table_rows(table: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The conditions' table: success, the paired differences from base and from GRPO on the target (bootstrap over
    seeds and games), and the seed-paired sign-flip test against GRPO on the target."""
    conditions = table["conditions"]
    base, grpo = conditions["base"], conditions[GRPO_TARGET]
    rows: list[tuple[str, ...]] = []
    for name, wins in conditions.items():
        against = name != GRPO_TARGET
        per_seed = wins.mean(axis=(1, 2)) - grpo.mean(axis=(1, 2))
        rows.append((name, str(success_interval(wins)), str(paired_difference(base, wins)) if name != "base" else "",
                     str(paired_difference(grpo, wins)) if against else "",
                     str(sign_flip_test(per_seed)) if against else ""))
    header: tuple[str, ...] = ("condition", "success [95%]", "minus base", f"minus {GRPO_TARGET}",
                               "seed-paired vs GRPO")
    return header, rows
