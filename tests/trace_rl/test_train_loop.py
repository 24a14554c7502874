"""The trainer's loop holds no mode: set up once (`train.set_up`), it runs every credit with every sampler that runs
on a CPU, and the iteration's three files (`train`, `learner`, `loss`) compare no setting with a word."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from toy_env import LetterEnv, capability_env
from tracec.trace_rl.grpo import credit as credit_module
from tracec.trace_rl.grpo.config import RUBRIC_CREDITS, TrainConfig, load_config
from tracec.trace_rl.grpo.credit import GiGPOCredit, GRPOCredit, OracleCredit, ShapedCredit, TRCACredit
from tracec.trace_rl.grpo.distributed import Distributed
from tracec.trace_rl.grpo.learner import LearnSequence
from tracec.trace_rl.grpo.train import Run, iterate, set_up
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import EpisodeRollout
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.script_sampler import ScriptSampler
from tracec.trace_rl.rollouts.turns import TurnTemplate

REPO = Path(__file__).resolve().parents[2]
TINY = ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8", "rollout.group_size=3",
        "rollout.groups_per_batch=2", "rollout.max_new_tokens=80", "rollout.max_context_tokens=1024", "optim.lr=3e-3",
        "iterations=2", "advantage.filter_constant_groups=false"]


class PlanLetterEnv(LetterEnv):
    """`LetterEnv` whose trajectory says which steps followed "the plan" (more than a tenth of letters a to m): the
    oracle's input."""

    def trajectory(self, episode: str) -> dict[str, Any]:
        return {**super().trajectory(episode), "on_plan": [action["share"] > 0.1 for action in self.actions]}


# credit -> (its settings, the environment it needs: rewards that differ for GRPO, a rubric's facts for TRCA, a
# plan for the oracle)
CREDITS: dict[str, tuple[list[str], Callable[[], Any], type]] = {
    "grpo": (["advantage.kind=grpo"], LetterEnv, GRPOCredit),
    "trca": (["advantage.kind=trca", f"advantage.rubric={REPO}/examples/toolenv.rubric", "env.max_turns=2"],
             capability_env, TRCACredit),
    "gigpo": (["advantage.kind=gigpo"], LetterEnv, GiGPOCredit),
    "shaped": (["advantage.kind=shaped", f"advantage.rubric={REPO}/examples/toolenv.rubric", "env.max_turns=2"],
               capability_env, ShapedCredit),
    "oracle": (["advantage.kind=oracle"], PlanLetterEnv, OracleCredit),
}


def _script(key: int, turn: int) -> str:
    """A member that calls a tool (the rubric's facts), one that writes letters a to m (LetterEnv's reward, on the
    plan) and one that writes none of them (off the plan: under a tenth of its characters, the tags' included): the
    members of a group are told apart by every credit."""
    return ['<action>get_reservation_details(reservation_id="AB12")</action>', "<action>abab</action>",
            "<action>" + "yz" * 25 + "</action>"][key % 3]


def _script_sampler(policy: Policy, template: TurnTemplate) -> ScriptSampler:
    return ScriptSampler(template, _script)


SAMPLERS: dict[str, Callable[[Policy, TurnTemplate], Any] | None] = {"kv_cache": None, "script": _script_sampler}


def _recording(run: Run) -> tuple[list[list[np.ndarray]], list[list[LearnSequence]]]:
    """Record what the run's credit computes and what its learner is given, leaving both as they are."""
    computed: list[list[np.ndarray]] = []
    learned: list[list[LearnSequence]] = []
    credit, update = run.credit, run.learner.update

    def recorded_credit(episodes: Sequence[EpisodeRollout]) -> list[np.ndarray]:
        computed.append(credit(episodes))
        return computed[-1]

    def recorded_update(local: Sequence[LearnSequence], table: Any, **kwargs: Any) -> Any:
        learned.append(list(local))
        return update(local, table, **kwargs)

    run.credit = recorded_credit
    run.learner.update = recorded_update  # type: ignore[method-assign]
    return computed, learned


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("kind", CREDITS)
def test_the_mode_free_loop_runs_every_credit_with_every_cpu_sampler(tmp_path: Path, kind: str,
                                                                     sampler: str) -> None:
    settings, make_env, credit_type = CREDITS[kind]
    config: TrainConfig = load_config(None, [*TINY, *settings])
    run = set_up(config, tmp_path, resume=False, make_env=make_env, make_sampler=SAMPLERS[sampler],
                 dist=Distributed(), device="cpu")
    assert isinstance(run.credit, credit_type)
    assert isinstance(run.sampler, KVCacheSampler if SAMPLERS[sampler] is None else ScriptSampler)
    start = {name: value.clone() for name, value in run.policy.adapter_state().items()}
    computed, learned = _recording(run)
    alike = (kind, sampler) == ("shaped", "kv_cache")
    for iteration in range(config.run.iterations):
        metrics = iterate(run, config, Distributed(), iteration)
        assert metrics["optimizer_steps"] >= 1 and np.isfinite(metrics["loss"])
    assert len(computed) == len(learned) == config.run.iterations
    for advantages, sequences in zip(computed, learned, strict=True):
        # every group is kept (no filtering): the learner gets each episode's advantages exactly as the credit gave
        # them, in the episodes' order, and some are not 0
        assert [s.key for s in sequences] == sorted(s.key for s in sequences)
        assert len(advantages) == len(sequences)
        for given, sequence in zip(advantages, sequences, strict=True):
            assert np.array_equal(sequence.advantages, given)
        # the untrained tiny model's tool calls all score alike on the rubric, so only the script's members (a call,
        # letters, neither) tell an episode-level rubric return apart
        if not alike:
            assert any(np.any(s.advantages[s.loss_mask] != 0) for s in sequences)
        if run.sampler.recomputes_old_logprobs:  # a script's log-prob 0 is replaced by the trainer's own
            assert all(np.all(s.old_logprobs[s.loss_mask] < 0) for s in sequences)
    if run.sampler.decodes_with_training_weights and not alike:  # on-policy: the update moves the adapter
        moved = run.policy.adapter_state()
        assert any(not torch.equal(moved[name], value) for name, value in start.items())


def _compares_with_a_word(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    words = [o for o in operands if isinstance(o, ast.Constant) and isinstance(o.value, str)]
    words += [o for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set))
              and any(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in o.elts)]
    return bool(words)


@pytest.mark.parametrize("module", ["train", "learner", "loss"])
def test_the_iteration_tests_no_mode(module: str) -> None:
    for mode in ('config.rollout.backend == "vllm"', 'level in ("token", "command")'):  # what the check finds
        assert _compares_with_a_word(ast.parse(mode, mode="eval").body)  # type: ignore[arg-type]
    path = REPO / "trace_rl" / "grpo" / f"{module}.py"
    found = [f"{path.name}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Compare) and _compares_with_a_word(node)]
    assert not found, f"a mode tested in the loop; resolve it once at set-up instead: {found}"


def test_every_advantage_kind_the_config_offers_has_its_credit() -> None:
    offered = {"grpo", "trca", "gigpo", "shaped", "oracle"}
    assert set(CREDITS) == offered
    for kind in offered - set(RUBRIC_CREDITS):  # these need a rubric and an opening state: the loop test builds them
        advantage = load_config(None, [f"advantage.kind={kind}"]).advantage
        assert isinstance(credit_module.credit_for(advantage, {}), CREDITS[kind][2])
