"""TRACE's conditions on the TextWorld family: the base agent, its labelled collections, capability adapters, routing.

    base = save_base_agent(setup, spec, work / "base-agent")          # GRPO on the target, folded into the weights
    runs = labelling_runs(policy, setup, spec, seeds, work / "runs", runs=5, episodes=2)
    adapter = train_on_games(spec, setup, pool, games, seeds, work / "adapters" / "unlock-s0")
    wins = play_adapter(base, adapter, setup, spec, test_seeds, stream=EVAL_STREAM)  # (games, episodes)
    probe = NeedProbe.fit(features(policy, setup, spec, seeds), [needs(plan) for plan in plans], capabilities)

The base agent is the small policy after a short GRPO run on the target's training games, its adapter folded into
the weights and saved as a checkpoint folder with `base_agent.json` saying how it was made: a fixed agent that
wins some tasks and loses others for reasons the labels can attribute. Every adapter is a fresh LoRA trained on that
checkpoint.

Routing. TRACE routes a task by the base model's next-token logits over the capabilities' labels, which needs a
model that can read a question about a task; the small policy, which only ever chose among game commands, cannot.
It routes by what serves that role: a logistic probe per selected capability on the base agent's own last hidden
layer over the task's opening prompt, fitted on the target's training tasks against what each task needs (its
gold plan), then applied to tasks it never saw. A task goes to the selected capability its probe says it needs
(probability >= 1/2) that selection ranked highest; a task it says needs none keeps the base agent. The oracle
router sends a task to the highest-ranked selected capability its gold plan needs (the upper bound of routing; a
task that needs none of them keeps the base agent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tracec.trace_rl.envs.textworld.family import FamilyEnvironment, TaskFamily
from tracec.trace_rl.experiments.learning_curve import RunSpec, Setup, play, run_config
from tracec.trace_rl.experiments.trace_family import (
    CAPABILITIES,
    DESCRIPTIONS,
    LabelledEpisode,
    SeedListEnvironment,
    episode_labels,
    gold_plan,
    run_buckets,
)
from tracec.trace_rl.grpo.run_folder import run_started
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.targeting.adapters import adapter_config
from tracec.trace_rl.targeting.analysis.dictionary import Capability, stamp
from tracec.trace_rl.targeting.analysis.runs import write_run

from tracec.atomic import write_atomic

COLLECTION_STREAM = 20_261_206  # the labelling runs' random streams are this plus the run's index


def games_environment(family: TaskFamily, games: Path, seeds: Sequence[int]) -> Callable[[], SeedListEnvironment]:
    """A factory of environments playing the games `seeds` of `family` (made in `games`), task index i the i-th."""
    def make() -> SeedListEnvironment:
        return SeedListEnvironment(FamilyEnvironment(family, games, list_commands=False), seeds)
    return make


def train_on_games(spec: RunSpec, setup: Setup, family: TaskFamily, seeds: Sequence[int], out: Path) -> Path:
    """Train `spec` on the games `seeds` of `family` (made in `setup.games`), played in turn; resumes a run killed
    in `out` and returns the final adapter's folder."""
    indexed = replace(setup, family=replace(family, train_seeds=tuple(range(len(seeds))),
                                            eval_seeds=setup.family.eval_seeds))
    config = run_config(spec, indexed, out)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    return train(config, out=out, resume=run_started(out),
                 make_env=games_environment(family, setup.games, seeds)).adapter


def save_base_agent(setup: Setup, spec: RunSpec, out: Path, *, adapter: Path | None = None) -> Path:
    """The base agent: `spec` trained on the target's training games (in `out/run`), or the given `adapter` folder,
    folded into the weights of `spec.model` and saved with the tokenizer in `out`, beside `base_agent.json` (how it
    was made). Made once."""
    record = out / "base_agent.json"
    if record.is_file():
        return out
    if adapter is None:
        adapter = train_on_games(spec, setup, setup.family, setup.family.train_seeds, out / "run")
        how = {"trained_from": spec.model, "method": spec.method,
               "rollouts": spec.iterations * spec.rollouts_per_iteration,
               "games": [setup.family.train_seeds[0], setup.family.train_seeds[-1]], "spec": asdict(spec)}
    else:
        how = {"trained_from": spec.model, "adapter": str(adapter)}
    policy = with_adapter(spec.model, adapter)
    merged = policy.model.merge_and_unload()
    merged.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    write_atomic(record, [json.dumps(how, indent=2, default=str)])
    return out


def with_adapter(model: str, adapter: Path, *, device: str = "cpu") -> Policy:
    """`model` with the adapter folder loaded as its trained LoRA, whose rank, alpha and modules are the folder's own
    (a merge has the rank of the adapters it sums)."""
    config = adapter_config(adapter)
    lora = LoraSection(rank=int(config["r"]), alpha=float(config["lora_alpha"]),
                       targets=tuple(sorted(config["target_modules"])))
    policy = Policy.load(model, lora, device=device, seed=0)
    policy.load_adapter_state(load_file(str(adapter / "adapter_model.safetensors"), device=device))
    return policy


def dictionary() -> list[Capability]:
    return [Capability(name=name, description=DESCRIPTIONS[name]) for name in CAPABILITIES]


def labelling_runs(policy: Policy, setup: Setup, spec: RunSpec, seeds: Sequence[int], out: Path, *, runs: int,
                   episodes: int) -> list[Path]:
    """`runs` labelling runs in TRACE's run format (`out/run_<i>.json`): in each, the base agent plays `episodes`
    episodes of every game in `seeds` from its own random stream, and every episode is labelled from its game's plan.
    A run already written is kept."""
    plans = {seed: gold_plan(setup.family.game_file(seed, setup.games)) for seed in seeds}
    stamped = stamp(dictionary())
    paths = []
    for run in range(runs):
        path = out / f"run_{run}.json"
        if not path.is_file():
            played = play(policy, setup, spec, seeds, episodes=episodes, stream=COLLECTION_STREAM + run)
            labelled = [LabelledEpisode(episode=f"{e.seed}.{e.member}", seed=e.seed, success=e.success,
                                        labels=episode_labels(plans[e.seed], e.trajectory)) for e in played]
            failed = sum(not e.success for e in labelled)
            out.mkdir(parents=True, exist_ok=True)
            write_run(path, attempt=run, total_failed=failed, total_passed=len(labelled) - failed,
                      labels=run_buckets(labelled), dictionary=stamped)
        paths.append(path)
    return paths


def play_adapter(base: Path, adapter: Path | None, setup: Setup, spec: RunSpec, seeds: Sequence[int], *,
                 stream: int) -> np.ndarray:
    """Wins (games, episodes) of the base agent in `base` with `adapter` (None: the base agent alone, its fresh LoRA
    adding nothing) on `seeds`, `spec.eval_episodes` episodes a game from random stream `stream`."""
    if adapter is None:
        policy = Policy.load(str(base), spec.lora, device=spec.device, seed=0)
    else:
        policy = with_adapter(str(base), adapter, device=spec.device)
    played = play(policy, setup, spec, seeds, episodes=spec.eval_episodes, stream=stream)
    return np.array([float(e.success) for e in played]).reshape(len(seeds), spec.eval_episodes)


def opening_features(policy: Policy, setup: Setup, spec: RunSpec, seeds: Sequence[int]) -> np.ndarray:
    """(tasks, hidden): the base agent's last hidden layer at each task's opening prompt, averaged over its tokens
    (the prompt's last position, the generation prompt's, says little of the task)."""
    template = TurnTemplate(policy.tokenizer)
    env = FamilyEnvironment(setup.family, setup.games, list_commands=spec.action_mode == "generate")
    rows = []
    try:
        with torch.no_grad(), policy.base_model():
            for seed in seeds:
                prompt = template.prompt_ids(env.system_prompt, env.reset(seed))
                output = policy.model(input_ids=torch.tensor([prompt], device=policy.device), output_hidden_states=True)
                rows.append(output.hidden_states[-1][0].mean(dim=0).double().cpu().numpy())
    finally:
        env.close()
    return np.stack(rows)


@dataclass(frozen=True)
class NeedProbe:
    """One logistic regression per capability on standardized features: P(the task needs it)."""

    capabilities: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # (capabilities, features + 1), the bias last

    @classmethod
    def fit(cls, features: np.ndarray, needed: Sequence[frozenset[str]], capabilities: Sequence[str], *,
            l2: float = 1.0, steps: int = 500) -> NeedProbe:
        mean, scale = features.mean(axis=0), features.std(axis=0) + 1e-8
        x = torch.tensor(np.hstack([(features - mean) / scale, np.ones((len(features), 1))]))
        y = torch.tensor([[float(c in need) for c in capabilities] for need in needed])
        weights = torch.zeros(x.shape[1], len(capabilities), dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.LBFGS([weights], max_iter=steps, line_search_fn="strong_wolfe")

        def loss() -> torch.Tensor:
            optimizer.zero_grad()
            value = torch.nn.functional.binary_cross_entropy_with_logits(x @ weights, y.double()) + \
                l2 * weights[:-1].square().sum() / len(x)
            value.backward()
            return value
        optimizer.step(loss)
        return cls(tuple(capabilities), mean, scale, weights.detach().numpy().T.copy())

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        x = np.hstack([(features - self.mean) / self.scale, np.ones((len(features), 1))])
        return 1.0 / (1.0 + np.exp(-(x @ self.weights.T)))


def route(probabilities: np.ndarray, ranked: Sequence[str], capabilities: Sequence[str]) -> list[str | None]:
    """Each task's adapter: the highest-ranked capability whose probability is >= 1/2 (None, the base agent alone,
    where none is: as the oracle router keeps base for a task that needs no selected capability)."""
    order = [capabilities.index(name) for name in ranked]
    return [next((capabilities[i] for i in order if row[i] >= 0.5), None) for row in probabilities]


def oracle_route(plans: Sequence[Sequence[str]], ranked: Sequence[str],
                 needs_of: Callable[[Sequence[str]], frozenset[str]]) -> list[str | None]:
    """Each task's adapter by its gold plan: the highest-ranked selected capability it needs (None: none)."""
    return [next((name for name in ranked if name in needs_of(plan)), None) for plan in plans]


def routed_wins(per_adapter: dict[str | None, np.ndarray], routes: Sequence[str | None]) -> np.ndarray:
    """(games, episodes): each game's episodes as played by its routed adapter (None: the base agent). The episodes
    of one game under one adapter are the same whichever condition asks (one random stream a game)."""
    return np.stack([per_adapter[name][game] for game, name in enumerate(routes)])
