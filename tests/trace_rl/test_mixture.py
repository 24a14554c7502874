"""Multi-capability GRPO's environment: a weighted mixture of capability environments. The seed's component is
drawn in proportion to the weights, a group (one seed) shares it, every call reaches it, and the tiny model trains
on a mixture of two shipped environments and resumes to the same adapter."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.mixture import MixtureEnvironment, component_index
from tracec.trace_rl.envs.registry import environment_factory
from tracec.trace_rl.grpo.config import ConfigError, load_config
from tracec.trace_rl.grpo.train import train

REPO = Path(__file__).resolve().parents[2]
ENVS = [REPO / "examples" / "envs" / f"{name}.rubric" for name in ("multi_step_completion",
                                                                    "precondition_verification")]
MIXTURE = ["env.kind=mixture", f"env.mixture.paths={json.dumps([str(p) for p in ENVS])}", "env.max_turns=2"]
TINY = ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8", "rollout.group_size=2",
        "rollout.groups_per_batch=2", "rollout.max_new_tokens=12", "rollout.max_context_tokens=4096", "optim.lr=3e-3",
        "optim.mini_batches=1", "checkpoint_every=1", "advantage.kind=trca",
        f"advantage.rubric={REPO}/examples/toolenv.rubric"]


def test_the_component_draw_follows_the_weights() -> None:
    weights = (1.0, 3.0, 0.0, 4.0)
    seeds = 40_000
    counts = Counter(component_index(seed, weights) for seed in range(seeds))
    assert counts[2] == 0  # a zero weight is never drawn
    for index, weight in enumerate(weights):  # 5 binomial standard deviations at most (<= 0.0125)
        assert abs(counts[index] / seeds - weight / sum(weights)) < 0.0125
    assert [component_index(s, weights) for s in range(50)] == [component_index(s, weights) for s in range(50)]
    assert Counter(component_index(s, (2.0, 2.0)) for s in range(1000)) == \
        Counter(component_index(s, (1.0, 1.0)) for s in range(1000))  # only proportions count
    with pytest.raises(ValueError, match="not all 0"):
        component_index(0, (0.0, 0.0))


def _mixture(env: object) -> MixtureEnvironment:
    assert isinstance(env, MixtureEnvironment)
    return env


def test_a_group_shares_its_component_and_every_call_reaches_it() -> None:
    config = load_config(None, MIXTURE)
    make = environment_factory(config.env)
    plain = {p.stem: CapabilityEnvironment(load_environment(str(p))) for p in ENVS}
    drawn = set()
    for seed in range(12):
        group = [_mixture(make()) for _ in range(3)]  # a GRPO group: K fresh environments reset with one seed
        firsts = [env.reset(seed).text for env in group]
        (component,) = {env.component for env in group}
        drawn.add(component)
        alone = plain[str(component)]
        assert firsts == [alone.reset(seed).text] * 3
        env = group[0]
        assert env.system_prompt == alone.system_prompt and env.hint() == alone.hint()
        assert env.step("I am done.").done == alone.step("I am done.").done
        assert env.trajectory("e")["instruction"] == alone.trajectory("e")["instruction"]
        for member in group:
            member.close()
    assert drawn == set(plain)  # both components come up in twelve seeds
    fresh = _mixture(make())
    for call in (fresh.hint, lambda: fresh.admissible_commands, lambda: fresh.step("x")):
        with pytest.raises(RuntimeError, match="before its first reset"):  # no component to ask yet
            call()
    with pytest.raises(ValueError, match="2 components but 1 weights"):
        MixtureEnvironment([("a", make), ("b", make)], weights=(1.0,))


def test_the_mixture_config_is_checked_and_its_paths_resolved(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    for path in ENVS:
        (tmp_path / "envs" / path.name).write_text(path.read_text())
    toml = tmp_path / "train.toml"
    toml.write_text('[env]\nkind = "mixture"\n\n[env.mixture]\npaths = ["envs/multi_step_completion.rubric", '
                    '"envs/precondition_verification.rubric"]\nweights = [1, 3]\n')
    config = load_config(toml)
    assert config.env.mixture.paths == tuple(str(tmp_path / "envs" / p.name) for p in ENVS)
    assert config.env.mixture.weights == (1.0, 3.0)
    toml.write_text(toml.read_text().replace("[1, 3]", "[1]"))
    with pytest.raises(ConfigError, match=r"train.toml:6:1: error: env.mixture.weights = \[1.0\]: give one weight"):
        load_config(toml)
    with pytest.raises(ConfigError, match="a mixture names its capability environments"):
        load_config(None, ["env.kind=mixture"])
    missing = load_config(None, ["env.kind=mixture", f"env.mixture.paths=[\"{ENVS[0]}\", \"{tmp_path}/no.rubric\"]"])
    with pytest.raises(ConfigError, match=r"env.mixture.paths\[1\] = .*no.rubric'?: no such file"):
        environment_factory(missing.env)


def _adapter(run: Path, iteration: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"iter_{iteration:06d}" / "adapter" / "adapter_model.safetensors"))


def test_grpo_trains_on_a_mixture_and_resumes_exactly(tmp_path: Path, one_torch_thread: None) -> None:
    config = load_config(None, [*TINY, *MIXTURE, "iterations=2"])
    whole = train(config, out=tmp_path / "whole")
    assert [m["groups_trained"] for m in whole.metrics] == [2, 2]  # TRCA's step advantages teach every group
    first = train(config.replace(run=dataclasses.replace(config.run, iterations=1)), out=tmp_path / "cut")
    assert len(first.metrics) == 1
    resumed = train(config, out=tmp_path / "cut", resume=True)
    assert [m["reward_mean"] for m in resumed.metrics] == [m["reward_mean"] for m in whole.metrics]
    a, b = _adapter(tmp_path / "whole", 2), _adapter(tmp_path / "cut", 2)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    start = _adapter(tmp_path / "cut", 1)
    assert any(not torch.equal(a[k], start[k]) for k in a)  # the second iteration moved the adapter
