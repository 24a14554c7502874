"""`tracec demo`: the main job in minutes on a CPU: a policy learns TextWorld games with TRCA and with sparse GRPO.

1. The task family (`envs.textworld.family`): seeded TextWorld games, quests of 3-6 steps, training seeds and held-out
   seeds fixed here (`DEMO_FAMILY`), made once into `workdir/games`; the small policy (`small_policy`) built from
   the training games' vocabulary. The untrained policy rarely wins: the cold-start regime.
2. The small policy trained twice through the one trainer with the same rollout budget: sparse GRPO (a win or
   nothing) and GRPO + TRCA (`examples/textworld.rubric`), the two runs side by side in two processes; each
   checkpoint evaluated on the held-out seeds (`learning_curve`). It prints held-out success vs rollouts for both
   with 95% intervals over the held-out games, one headline line with TRCA's gap to GRPO and its paired interval
   (it says when the interval holds 0), and each run's trust-region diagnostics; it writes `learning.png` with
   both curves, plus `learning.json` with every number.
3. TRACE on the same games (`demo_trace`): the sparse-GRPO run as the base agent, its labelled episodes,
   selection, capability environments of short quests, an adapter each, and every condition against GRPO on the
   target at equal rollouts, with intervals and one headline line.
4. Optionally (`--smol-iterations N`), a short run of SmolLM2-135M-Instruct + LoRA (the real model, installed by
   `make`), its held-out success and reward before and after, whatever they show; skipped with a message when the
   model is not installed.

The policy acts by choosing among the admissible commands (`rollout.action_mode = "admissible"`), and the loss acts
on that policy, log pi(c|s) over the commands (`choice_policy`): a policy that starts from random weights cannot
write a command, and that mode is what the experiment measures (docs/learning.md). Third-party warnings and
progress bars are silenced unless `tracec --library-output demo`.
The shipped rubric is package data (`tracec.examples`), found through `importlib.resources` (`demo_settings`), so
the demo runs from any working folder. Every budget is an option (`DemoBudget`, in `demo_settings` with the held-out
seeds: what the command line reads without torch); the defaults finish in about 12 minutes on 2 cores.
Left out: the full experiment (seeds, spread, ablations: `bench/learning.py`).
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import shutil
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from queue import Empty
from typing import Any

import numpy as np
from tqdm import tqdm
from tracec.trace_rl.envs.textworld.family import TaskFamily
from tracec.trace_rl.experiments.demo_settings import EVAL_SEED_BASE, DemoBudget
from tracec.trace_rl.experiments.demo_trace import DEMO_TRACE, trace_section
from tracec.trace_rl.experiments.learning_curve import (
    Curve,
    CurvePoint,
    RunSpec,
    Setup,
    learning_curve,
    plot_curves,
    prepare_setup,
)
from tracec.trace_rl.experiments.learning_stats import paired_auc, paired_difference, success_interval
from tracec.trace_rl.grpo.run_folder import latest_checkpoint
from tracec.trace_rl.policy.catalog import ModelError, resolve_model
from tracec.trace_rl.policy.lora import LoraSection

from tracec.atomic import write_atomic
from tracec.quiet import quiet_libraries


def demo_family(train_games: int = 32, eval_games: int = 24) -> TaskFamily:
    """The demo's games: the first `train_games` training seeds and the first `eval_games` held-out seeds."""
    if not 0 < train_games <= EVAL_SEED_BASE or eval_games < 1:
        raise ValueError(f"demo_family: train_games={train_games} must be in [1, {EVAL_SEED_BASE}] and "
                         f"eval_games={eval_games} >= 1")
    return TaskFamily(train_seeds=tuple(range(train_games)),
                      eval_seeds=tuple(range(EVAL_SEED_BASE, EVAL_SEED_BASE + eval_games)))


DEMO_FAMILY = demo_family()
METHODS = (("grpo", "sparse GRPO"), ("trca", "GRPO + TRCA"))
SMOLLM2 = "smollm2-135m-instruct"


def method_spec(method: str, setup: Setup, budget: DemoBudget, *, seed: int = 0) -> RunSpec:
    return RunSpec(method=method, model=str(setup.small_policy), rubric=setup.rubric, iterations=budget.iterations,
                   eval_every=budget.eval_every, groups_per_batch=budget.groups, group_size=budget.group_size,
                   lr=budget.lr, clip_eps=budget.clip_eps, target_kl=budget.target_kl,
                   eval_episodes=budget.eval_episodes, seed=seed)


def run_demo(workdir: Path, budget: DemoBudget | None = None, *, family: TaskFamily = DEMO_FAMILY,
             verbose: bool = False) -> int:
    budget = budget or DemoBudget()
    if not verbose:
        quiet_libraries()
    workdir.mkdir(parents=True, exist_ok=True)
    began, cpu_began = time.perf_counter(), _cpu_seconds()
    _section(f"1. the task family: {len(family.train_seeds)} training games, {len(family.eval_seeds)} held-out games "
             f"(quests of {min(family.quest_lengths)}-{max(family.quest_lengths)} steps, {family.max_turns} turns)")
    setup = prepare_setup(workdir, family, hidden=budget.hidden)
    print(f"  games in {setup.games}; small policy {setup.small_policy} ({_parameters(setup.small_policy)})")

    rollouts = budget.iterations * budget.groups * budget.group_size
    _section(f"2. the small policy, {rollouts} rollouts a method: sparse GRPO and GRPO + TRCA ({setup.rubric.name})")
    curves = _train_methods(setup, budget, workdir)
    print(f"  each point: {budget.eval_episodes * len(family.eval_seeds)} held-out episodes ({len(family.eval_seeds)} "
          f"games x {budget.eval_episodes}), sampled from one fixed stream")
    _print_curves(curves)
    figure = plot_curves({label: [curves[method]] for method, label in METHODS}, workdir / "learning.png",
                         title="TextWorld family, small policy: held-out success")
    print(f"  curves: {figure}")

    trace: dict[str, Any] | None = None
    if budget.trace_iterations:
        trace_budget = replace(DEMO_TRACE, adapter_iterations=budget.trace_iterations,
                               pool_games=budget.trace_pool_games, lr=budget.lr)
        each = trace_budget.adapter_iterations * trace_budget.groups * trace_budget.group_size
        _section(f"3. TRACE: capability adapters of {each} rollouts each, against GRPO on the same games at equal "
                 "rollouts")
        grpo = latest_checkpoint(workdir / "runs" / "grpo")  # the sparse-GRPO run of section 1
        if grpo is None:
            raise RuntimeError(f"{workdir}/runs/grpo: section 1's sparse-GRPO run saved no checkpoint")
        trace = trace_section(setup, grpo / "adapter", trace_budget, workdir)

    smol: dict[str, Any] | None = None
    if budget.smol_iterations:
        iterations = f"{budget.smol_iterations} iteration{'s' * (budget.smol_iterations != 1)}"
        _section(f"4. SmolLM2-135M-Instruct + LoRA: {iterations} of {budget.smol_groups} x {budget.smol_group_size} "
                 "episodes (GRPO + TRCA)")
        smol = _smollm2(setup, budget, workdir)
    wall, cpu = time.perf_counter() - began, _cpu_seconds() - cpu_began
    _write_summary(workdir / "learning.json", budget, curves, trace, smol, wall, cpu)
    print(f"\n{wall:.0f} s wall, {cpu:.0f} s CPU; artefacts in {workdir}/")
    return 0


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _parameters(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return (f"Llama, hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, "
            f"vocabulary {config['vocab_size']}")


def _train_methods(setup: Setup, budget: DemoBudget, workdir: Path) -> dict[str, Curve]:
    """Both methods' curves; in two spawned processes (one torch thread each) or one after the other."""
    per_method = budget.iterations + budget.iterations // budget.eval_every + 1
    bar = tqdm(total=per_method * len(METHODS), desc="train + eval", unit="step", file=sys.stderr,
               dynamic_ncols=True)
    curves: dict[str, Curve] = {}
    try:
        if not budget.parallel:
            for method, _ in METHODS:
                curves[method] = learning_curve(setup, method_spec(method, setup, budget), _run_dir(workdir, method),
                                                on_iteration=lambda _: bar.update(1),
                                                on_evaluation=lambda _: bar.update(1))
            return curves
        context = multiprocessing.get_context("spawn")  # no fork of a process holding torch's thread pools
        queue = context.Queue()
        workers = [context.Process(target=_worker, args=(method, setup, budget, _run_dir(workdir, method), queue))
                   for method, _ in METHODS]
        for worker in workers:
            worker.start()
        while len(curves) < len(workers):
            try:
                kind, method, payload = queue.get(timeout=5)
            except Empty:  # a worker killed from outside (out of memory) sends nothing: say so, never hang
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a training process died (exit code {dead[0]})") from None
                continue
            if kind == "error":
                raise RuntimeError(f"the {method} run failed:\n{payload}")
            if kind == "done":
                curves[method] = payload
            else:
                bar.update(1)
        for worker in workers:
            worker.join()
        return curves
    finally:
        bar.close()


def _run_dir(workdir: Path, method: str) -> Path:
    path = workdir / "runs" / method
    if path.exists():  # a fresh run each time: the demo's numbers are its own
        shutil.rmtree(path)
    return path


def _worker(method: str, setup: Setup, budget: DemoBudget, out: Path, queue: Any) -> None:
    quiet_libraries()
    try:
        curve = learning_curve(setup, method_spec(method, setup, budget), out,
                               on_iteration=lambda _: queue.put(("iteration", method, None)),
                               on_evaluation=lambda _: queue.put(("evaluation", method, None)))
        queue.put(("done", method, curve))
    except BaseException:  # noqa: BLE001 - the parent reports it; a worker must never leave it waiting
        queue.put(("error", method, traceback.format_exc()))


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it waited for (the game makers, the method workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _print_curves(curves: dict[str, Curve]) -> None:
    """The two curves side by side with 95% intervals over the held-out games, the headline gap with its interval,
    and each run's trust-region diagnostics."""
    grpo, trca = curves["grpo"], curves["trca"]
    print(f"\n  {'rollouts':>8}  {'sparse GRPO':>22}  {'GRPO + TRCA':>22}   (held-out success, 95% CI over games)")
    for a, b in zip(grpo.points, trca.points, strict=True):
        print(f"  {a.rollouts:>8}  {_with_interval(a):>22}  {_with_interval(b):>22}")
    print(headline(grpo, trca))
    for method, label in METHODS:
        print(f"  {label}: {trust_region_summary(curves[method].train_metrics)}")
    print(f"  groups with no signal (all advantages 0): sparse GRPO {grpo.constant_fraction():.0%}, "
          f"TRCA {trca.constant_fraction():.0%}")


def _wins(point: CurvePoint) -> np.ndarray:
    return np.asarray(point.wins, dtype=float)[None]  # one seed: (1, games, episodes)


def _with_interval(point: CurvePoint) -> str:
    return success_interval(_wins(point)).level()


def headline(grpo: Curve, trca: Curve) -> str:
    """The pre-registered primary metric first (docs/learning.md): TRCA minus GRPO in the area under the held-out
    success curve, its paired 95% interval and what it allows one to say; then the difference at the end."""
    rollouts = [p.rollouts for p in grpo.points]
    area = paired_auc(rollouts, np.stack([[np.asarray(p.wins, dtype=float) for p in grpo.points]]),
                      np.stack([[np.asarray(p.wins, dtype=float) for p in trca.points]]))
    final = paired_difference(_wins(grpo.points[-1]), _wins(trca.points[-1]))
    verdict = ("TRCA ahead" if area.low > 0 else "GRPO ahead") if area.excludes_zero() else \
        "the interval holds 0: this budget does not tell the methods apart"
    return (f"  TRCA - GRPO area under the held-out success curve (the primary metric): {area} (paired over the "
            f"same games, 95%); {verdict}\n  TRCA - GRPO held-out success at {rollouts[-1]} rollouts: {final}")


def trust_region_summary(metrics: list[dict[str, Any]]) -> str:
    """How far the updates went from the sampling policy over a run: the worst per-step ratio p99 and maximum, the
    median approximate KL, the mean clip fraction, the largest gradient norm before clipping, early stops."""
    steps = [step for m in metrics for step in m.get("steps", ())]
    if not steps:
        return "no update taken"
    return (f"{len(steps)} optimizer steps, ratio p99 <= {max(s['ratio_p99'] for s in steps):.2f} (max "
            f"{max(s['ratio_max'] for s in steps):.2f}), "
            f"approx KL median {np.median([s['approx_kl'] for s in steps]):.4f}, "
            f"clipped {np.mean([s['clip_fraction'] for s in steps]):.1%}, grad norm <= "
            f"{max(s['grad_norm'] for s in steps):.2f}, "
            f"{sum(bool(m.get('early_stopped')) for m in metrics)} early stops")


def _smollm2(setup: Setup, budget: DemoBudget, workdir: Path) -> dict[str, Any] | None:
    try:
        resolve_model(SMOLLM2)
    except ModelError as error:
        print(f"  skipped: {error}")
        return None
    small = replace(setup, family=replace(setup.family, eval_seeds=setup.family.eval_seeds[:budget.smol_eval_seeds]))
    spec = RunSpec(method="trca", model=SMOLLM2, rubric=setup.rubric, lora=LoraSection(rank=16, alpha=16.0),
                   iterations=budget.smol_iterations, eval_every=budget.smol_iterations,
                   groups_per_batch=budget.smol_groups, group_size=budget.smol_group_size, lr=budget.smol_lr,
                   clip_eps=budget.clip_eps, target_kl=budget.target_kl, eval_episodes=1, threads=1)
    curve = learning_curve(small, spec, _run_dir(workdir, "smollm2"))
    before, after = curve.points[0], curve.points[-1]
    gain = paired_difference(_wins(before), _wins(after))
    print(f"  held-out success {_with_interval(before)} -> {_with_interval(after)}, gain {gain} (paired, 95%), "
          f"points share {before.reward:.3f} -> {after.reward:.3f} ({len(small.family.eval_seeds)} held-out games, "
          f"one episode each, after {after.rollouts} training episodes; {curve.seconds:.0f} s)")
    print(f"  {trust_region_summary(curve.train_metrics)}")
    if not gain.excludes_zero():
        print("  at this budget the interval holds 0: bench/learning_smollm2.py runs SmolLM2 at a real one")
    return {"before": asdict(before), "after": asdict(after), "seconds": curve.seconds,
            "eval_games": len(small.family.eval_seeds)}


def _write_summary(path: Path, budget: DemoBudget, curves: dict[str, Curve], trace: dict[str, Any] | None,
                   smol: dict[str, Any] | None, wall: float, cpu: float) -> None:
    summary = {"budget": asdict(budget), "wall_s": wall, "cpu_s": cpu, "trace": trace, "smollm2": smol,
               "curves": {m: {"points": [asdict(p) for p in c.points], "constant_fraction": c.constant_fraction()}
                          for m, c in curves.items()}}
    write_atomic(path, [json.dumps(summary, indent=2) + "\n"])
