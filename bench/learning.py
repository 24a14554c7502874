"""The learning experiment: sparse GRPO against GRPO + TRCA on the TextWorld task family, seeds, ablations, SmolLM2.

    python bench/learning.py [--workdir out/learning] [--seeds 3] [--iterations 20] [--jobs 2] [--record]

Every run trains through the one trainer (`tracec.trace_rl.learning_curve`) on the family's training seeds and is
evaluated on its held-out seeds (fixed in `TaskFamily`, never trained on) every `--eval-every` iterations:
- the small policy (built locally), `--seeds` seeds each of sparse GRPO and GRPO + TRCA (examples/textworld.rubric),
  and the TRCA ablations lambda = 0, lambda = 1 and no context grouping (`--ablation-seeds` seeds each);
- SmolLM2-135M-Instruct + LoRA, one seed each of GRPO and TRCA at `--smol-iterations` (the largest budget that fits).
Reported: held-out success vs rollouts (mean and min-max over seeds), the rollouts each method needs to reach sparse
GRPO's final held-out success (on the mean curves), the share of constant groups, and diagnostics of the rubric on
the training games (how many walkthrough steps it rewards, its returns for the walkthrough and for random play).
Each run's curve is saved as JSON in the workdir and reused by a rerun with the same settings, so an interrupted
experiment continues where it stopped. `--record` writes the "learning" section of bench/RESULTS.md and the PNGs
beside it (bench/learning*.png). Runs go `--jobs` at a time, one torch thread each (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import markdown_table, record

SMOLLM2 = "smollm2-135m-instruct"


def main() -> None:
    args = _arguments()
    from tracec.trace_rl.learning_curve import prepare_setup
    from tracec.trace_rl.textworld_family import TaskFamily

    began = time.perf_counter()
    family = TaskFamily()  # 48 training games, 32 held-out games, fixed before any tuning
    setup = prepare_setup(args.workdir, family)
    runs = _runs(args, setup)
    curves = _run_all(runs, setup, args)
    wall = time.perf_counter() - began
    summary = _summarize(curves, args)
    summary["diagnostics"] = _diagnostics(setup)
    summary["wall_s"] = wall
    (args.workdir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    figures = _plots(curves, args.workdir)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2, default=str))
    if args.record:
        _record(summary, figures, args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("out/learning"))
    parser.add_argument("--seeds", type=int, default=3, help="seeds of sparse GRPO and of TRCA")
    parser.add_argument("--ablation-seeds", type=int, default=2, help="seeds of each TRCA ablation (0: none)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--dual-clip", type=float, default=0.0, help="the loss's dual clip c (0: off; try 3)")
    parser.add_argument("--eval-episodes", type=int, default=2, help="episodes a held-out game")
    parser.add_argument("--smol-iterations", type=int, default=4, help="SmolLM2 iterations (0: no SmolLM2 runs)")
    parser.add_argument("--smol-eval-seeds", type=int, default=16)
    parser.add_argument("--smol-lr", type=float, default=1e-4)
    parser.add_argument("--smol-groups", type=int, default=2)
    parser.add_argument("--smol-group-size", type=int, default=4)
    parser.add_argument("--smol-only", action="store_true", help="only the SmolLM2 runs (the GPU check)")
    parser.add_argument("--device", default="cpu", help="SmolLM2's device (cuda on a GPU machine)")
    parser.add_argument("--backend", default="transformers", help="SmolLM2's rollout sampler (vllm on GPUs)")
    parser.add_argument("--action-mode", default="admissible", help="SmolLM2: admissible | generate (vLLM needs generate)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one torch thread each)")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section (--section)")
    parser.add_argument("--section", default="learning", help="the section of bench/RESULTS.md to write")
    parser.add_argument("--notes", type=Path, help="a Markdown file of findings to append to the section")
    return parser.parse_args()


def _runs(args: argparse.Namespace, setup: Any) -> dict[str, Any]:
    """Every run of the experiment by name: (label, spec, setup)."""
    from tracec.trace_rl.learning_curve import RunSpec
    from tracec.trace_rl.train_config import LoraSection

    small = {"model": str(setup.small_policy), "rubric": setup.rubric, "iterations": args.iterations,
             "eval_every": args.eval_every, "groups_per_batch": args.groups, "group_size": args.group_size,
             "lr": args.lr, "dual_clip": args.dual_clip, "eval_episodes": args.eval_episodes}
    methods: list[tuple[str, str, dict[str, Any], int]] = [
        ("grpo", "sparse GRPO", {"method": "grpo"}, args.seeds),
        ("trca", "GRPO + TRCA", {"method": "trca"}, args.seeds),
        ("trca-lam0", "TRCA, lambda = 0", {"method": "trca", "lam": 0.0}, args.ablation_seeds),
        ("trca-lam1", "TRCA, lambda = 1", {"method": "trca", "lam": 1.0}, args.ablation_seeds),
        ("trca-nocontext", "TRCA, no context grouping", {"method": "trca", "context_grouping": False},
         args.ablation_seeds),
    ]
    runs = {f"{key}-s{seed}": (label, RunSpec(**small, **extra, seed=seed), setup)
            for key, label, extra, seeds in methods for seed in range(0 if args.smol_only else seeds)}
    if args.smol_iterations:
        smol_setup = replace(setup, family=replace(setup.family, eval_seeds=setup.family.eval_seeds[:args.smol_eval_seeds]))
        for key, label in (("grpo", "sparse GRPO"), ("trca", "GRPO + TRCA")):
            spec = RunSpec(method=key, model=SMOLLM2, rubric=setup.rubric, lora=LoraSection(rank=16, alpha=16.0),
                           iterations=args.smol_iterations, eval_every=max(args.smol_iterations // 2, 1),
                           groups_per_batch=args.smol_groups, group_size=args.smol_group_size, lr=args.smol_lr,
                           eval_episodes=1, threads=1 if args.device == "cpu" else 0, device=args.device,
                           backend=args.backend, action_mode=args.action_mode,
                           max_new_tokens=48 if args.action_mode == "generate" else 16)
            runs[f"smollm2-{key}-s0"] = (f"SmolLM2, {label}", spec, smol_setup)
    return runs


def _run_all(runs: dict[str, Any], setup: Any, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each run's curve (as saved JSON), running those not saved yet with these settings."""
    done: dict[str, dict[str, Any]] = {}
    todo = {}
    for name, (label, spec, run_setup) in runs.items():
        saved = args.workdir / "curves" / f"{name}.json"
        if saved.is_file() and json.loads(saved.read_text())["spec"] == _spec_key(spec):
            done[name] = json.loads(saved.read_text())
        else:
            todo[name] = (label, spec, run_setup)
    print(f"{len(done)} runs saved, {len(todo)} to run, {args.jobs} at a time", file=sys.stderr, flush=True)
    # the small policy's runs first (the main comparison), SmolLM2's last
    order = sorted(todo, key=lambda n: n.startswith("smollm2"))
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_one_run, name, *todo[name], args.workdir): name for name in order}
        for future in as_completed(futures):
            name = futures[future]
            done[name] = future.result()
            last = done[name]["points"][-1]
            print(f"{name}: held-out success {last['success']:.3f} after {last['rollouts']} rollouts, "
                  f"{done[name]['seconds']:.0f} s", file=sys.stderr, flush=True)
    return {name: done[name] for name in runs}


def _spec_key(spec: Any) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(spec), default=str))


def _one_run(name: str, label: str, spec: Any, setup: Any, workdir: Path) -> dict[str, Any]:
    import shutil
    import warnings

    from tracec.trace_rl.learning_curve import learning_curve

    warnings.filterwarnings("ignore")
    out = workdir / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    started = time.process_time()
    curve = learning_curve(setup, spec, out)
    result = {"name": name, "label": label, "spec": _spec_key(spec), "points": [asdict(p) for p in curve.points],
              "constant_fraction": curve.constant_fraction(), "seconds": curve.seconds,
              "cpu_s": time.process_time() - started,
              "train_success": [m.get("success_rate") for m in curve.train_metrics]}
    saved = workdir / "curves" / f"{name}.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(saved)
    return result


def _by_label(curves: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for curve in curves.values():
        grouped.setdefault(curve["label"], []).append(curve)
    return grouped


def _summarize(curves: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    methods = {}
    for label, runs in _by_label(curves).items():
        success = np.array([[p["success"] for p in run["points"]] for run in runs])
        reward = np.array([[p["reward"] for p in run["points"]] for run in runs])
        methods[label] = {"seeds": len(runs), "rollouts": [p["rollouts"] for p in runs[0]["points"]],
                          "success_mean": success.mean(axis=0).round(4).tolist(),
                          "success_min": success.min(axis=0).round(4).tolist(),
                          "success_max": success.max(axis=0).round(4).tolist(),
                          "reward_mean": reward.mean(axis=0).round(4).tolist(),
                          "constant_fraction": float(np.mean([r["constant_fraction"] for r in runs])),
                          "cpu_s": float(sum(r["cpu_s"] for r in runs)), "wall_s": float(sum(r["seconds"] for r in runs))}
    for prefix in ("", "SmolLM2, "):
        reference = methods.get(f"{prefix}sparse GRPO")
        if reference is None:
            continue
        target = reference["success_mean"][-1]
        rose = target > reference["success_mean"][0] + 1e-12
        for label, method in methods.items():
            if label.startswith("SmolLM2") != bool(prefix):
                continue
            method["rollouts_to_grpo_final"] = next(  # after some training: the start reaches nothing
                (x for x, y in zip(method["rollouts"], method["success_mean"]) if x > 0 and y >= target - 1e-12),
                None) if rose else "n/a: GRPO never rose above its start"
    return {"settings": vars(args) | {"workdir": str(args.workdir)}, "methods": methods, "runs": curves}


def _diagnostics(setup: Any) -> dict[str, Any]:
    """How the rubric sees the training games: the walkthrough's steps it rewards, and returns of good and random play."""
    import numpy as np
    from tracec.runtime.agent import run_episode
    from tracec.runtime.evaluate import RubricScorer
    from tracec.runtime.trajectories import IN_MEMORY, episode_from_record
    from tracec.trace_rl.envs.textworld_agents import RandomAgent, WalkthroughAgent
    from tracec.trace_rl.textworld_family import FamilyEnvironment

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
    random_result = scorer.evaluate([episode_from_record(r, IN_MEMORY) for r in random])
    a_trca, plan = random_result.rewards.A, np.array(on_plan, dtype=bool)
    a_grpo = _grpo_step_advantages(random, random_result.batch.episode_offsets)
    credit = {"random_steps": len(plan), "on_plan_share": float(plan.mean()),
              "trca_nonzero_share": float((np.abs(a_trca) > 1e-9).mean()),
              "grpo_nonzero_share": float((np.abs(a_grpo) > 1e-9).mean()),
              "trca_mean_A_on_plan": float(a_trca[plan].mean()), "trca_mean_A_off_plan": float(a_trca[~plan].mean()),
              "grpo_mean_A_on_plan": float(a_grpo[plan].mean()), "grpo_mean_A_off_plan": float(a_grpo[~plan].mean()),
              "trca_mean_abs_A": float(np.abs(a_trca).mean()), "grpo_mean_abs_A": float(np.abs(a_grpo).mean())}
    result = scorer.evaluate([episode_from_record(r, IN_MEMORY) for r in walk + random])
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
    from tracec.trace_rl.learning_curve import Curve, CurvePoint, RunSpec, plot_curves

    def as_curve(run: dict[str, Any]) -> Curve:
        spec = RunSpec(method=run["spec"]["method"], model=run["spec"]["model"], rubric=Path(run["spec"]["rubric"]))
        return Curve(spec=spec, points=[CurvePoint(**p) for p in run["points"]])

    grouped = {label: [as_curve(r) for r in runs] for label, runs in _by_label(curves).items()}
    main_labels = ["sparse GRPO", "GRPO + TRCA"]
    figures = [plot_curves({k: grouped[k] for k in main_labels if k in grouped}, workdir / "learning.png",
                           title="small policy: held-out success (mean, min-max over seeds)")]
    ablations = [k for k in grouped if k.startswith("TRCA,")]
    if ablations:
        figures.append(plot_curves({k: grouped[k] for k in ["GRPO + TRCA", *ablations] if k in grouped},
                                   workdir / "learning_ablations.png", title="TRCA ablations: held-out success"))
    smol = [k for k in grouped if k.startswith("SmolLM2")]
    if smol:
        figures.append(plot_curves({k: grouped[k] for k in smol}, workdir / "learning_smollm2.png",
                                   title="SmolLM2-135M-Instruct + LoRA: held-out success (1 seed)"))
    return figures


def _figure_name(section: str, name: str) -> str:
    """The PNG's name in bench/: the section's own (learning.png for "learning", learning_longer_budget.png for
    "learning, longer budget"), so that one section's record never overwrites another's figures."""
    slug = "_".join("".join(c if c.isalnum() else " " for c in section.lower()).split())
    return name.replace("learning", slug, 1)


def _record(summary: dict[str, Any], figures: list[Path], args: argparse.Namespace) -> None:
    import shutil

    bench = Path(__file__).resolve().parent
    names = []
    for figure in figures:
        name = _figure_name(args.section, figure.name)
        shutil.copyfile(figure, bench / name)
        names.append(name)
    rows = []
    for label, m in summary["methods"].items():
        curve = " ".join(f"{s:.3f}" for s in m["success_mean"])
        spread = f"{m['success_min'][-1]:.3f}-{m['success_max'][-1]:.3f}"
        reach = m.get("rollouts_to_grpo_final")
        rows.append([label, m["seeds"], curve, spread, f"{m['reward_mean'][-1]:.3f}", f"{m['constant_fraction']:.0%}",
                     "never" if reach is None else reach, f"{m['cpu_s'] / 60:.1f}"])
    d = summary["diagnostics"]
    small = summary["methods"].get("sparse GRPO", {})
    body = (f"Small policy: {args.iterations} iterations of {args.groups} groups x {args.group_size} episodes "
            f"({args.iterations * args.groups * args.group_size} rollouts a run), lr {args.lr:g}, held-out success on "
            f"32 games x {args.eval_episodes} episodes at rollouts {small.get('rollouts')}. SmolLM2: "
            f"{args.smol_iterations} iterations of {args.smol_groups} x {args.smol_group_size} episodes, {args.smol_eval_seeds} held-out games x 1, one seed. "
            f"CPU time of the runs {sum(m['cpu_s'] for m in summary['methods'].values()) / 60:.0f} min, {args.jobs} at a "
            f"time, one torch thread each, on a machine shared with other work.\n\n"
            + markdown_table(["method", "seeds", "held-out success (mean) at each evaluation", "final min-max",
                              "final points share", "constant groups", "rollouts to GRPO's final", "CPU min"], rows)
            + f"\n\nRubric diagnostics on the {d['walkthrough_games']} training games: the walkthrough wins "
            f"{d['walkthrough_success']:.0%}; {d['walkthrough_steps_rewarded']:.0%} of its steps fire a positive "
            f"operator, {d['walkthrough_steps_penalized']:.0%} an invalidity one; TRCA return "
            f"{d['return_walkthrough']:.3f} (walkthrough) vs {d['return_random']:.3f} (random play, which wins "
            f"{d['random_success']:.0%}). Games in which each operator fires on the walkthrough: "
            + ", ".join(f"{k} {v}" for k, v in d["walkthrough_games_per_operator"].items()) + ".\n\n"
            + _credit_text(d["credit_on_random_play"]) + "\n\n"
            + " ".join(f"![{n}]({n})" for n in names)
            + ("\n\n" + args.notes.read_text(encoding="utf-8").strip() if args.notes else ""))
    flags = []
    for key, value in vars(args).items():
        if key in ("record", "workdir", "notes") or value is False or value is None:
            continue
        flags.append(f"--{key.replace('_', '-')}" + ("" if value is True else f" {shlex.quote(str(value))}"))
    command = "python bench/learning.py " + " ".join(flags) + " --record"
    record(args.section, body, command)


def _credit_text(c: dict[str, Any]) -> str:
    return (f"Credit on cold-start play ({c['random_steps']} steps of random admissible commands, 8 players a training "
            f"game, scored as training groups): {c['on_plan_share']:.0%} of the steps are the winning plan's next "
            f"command. Steps with a non-zero advantage: TRCA {c['trca_nonzero_share']:.0%}, sparse GRPO "
            f"{c['grpo_nonzero_share']:.0%}. Mean advantage of on-plan vs other steps: TRCA "
            f"{c['trca_mean_A_on_plan']:+.3f} vs {c['trca_mean_A_off_plan']:+.3f}, GRPO {c['grpo_mean_A_on_plan']:+.3f} "
            f"vs {c['grpo_mean_A_off_plan']:+.3f}; mean |A|: TRCA {c['trca_mean_abs_A']:.3f}, GRPO "
            f"{c['grpo_mean_abs_A']:.3f}.")


if __name__ == "__main__":
    main()
