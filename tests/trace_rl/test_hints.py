"""Hint injection (`rollout.hint_ratio`): who gets the hint, what the sampler and the learner see, and that off is
today's engine exactly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ddp_update import synthetic_batch
from toy_env import LetterEnv, capability_env
from tracec.trace_rl.envs.capability import CapabilityEnvironment, compile_environment, load_environment
from tracec.trace_rl.envs.capability.guidance import derived_hint, gives_away
from tracec.trace_rl.envs.capability.validate import validate
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, ToolCall, format_call, parse_tool_call
from tracec.trace_rl.grpo.config import config_from_dict, load_config
from tracec.trace_rl.grpo.distributed import Distributed
from tracec.trace_rl.grpo.learner import Learner
from tracec.trace_rl.grpo.loss_units import TokenUnits
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine, hinted_members
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate

from tracec.config_io import FieldError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "examples" / "envs").glob("*.rubric"))  # the environment library

@pytest.fixture(scope="module")
def tiny() -> Policy:
    return Policy.load("tiny", LoraSection(rank=4, alpha=8), seed=1)


class Recording:
    """A sampler that remembers each request's context and each turn it gave."""

    def __init__(self, inner: KVCacheSampler) -> None:
        self.inner, self.contexts, self.turns = inner, {}, {}

    def sample(self, requests: Any) -> Any:
        turns = self.inner.sample(requests)
        for request, turn in zip(requests, turns):
            self.contexts.setdefault(request.key, list(request.context))
            self.turns.setdefault(request.key, list(turn.ids))
        return turns

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _engine(policy: Policy, make_env: Any, **settings: Any) -> tuple[RolloutEngine, TurnTemplate]:
    rollout = RolloutSection(temperature=0.9, max_new_tokens=24, max_context_tokens=2048, **settings)
    template = TurnTemplate(policy.tokenizer)
    sampler = KVCacheSampler(policy.model, temperature=rollout.temperature, end_of_turn_ids=template.end_of_turn_ids,
                             pad_id=policy.tokenizer.pad_token_id or 0)
    return RolloutEngine(Recording(sampler), template, make_env, rollout, max_turns=3), template  # type: ignore[arg-type]


def test_the_hinted_share_follows_hint_ratio_and_is_a_function_of_the_group() -> None:
    counts = [len(hinted_members(7, it, g, 8, (0.25, 0.5))) for it in range(20) for g in range(4)]
    assert all(2 <= c <= 4 for c in counts) and len(set(counts)) > 1
    assert hinted_members(7, 3, 2, 8, (0.25, 0.5)) == hinted_members(7, 3, 2, 8, (0.25, 0.5))
    draws = {hinted_members(7, it, 1, 8, (0.25, 0.5)) for it in range(10)}
    assert len(draws) > 1  # the iteration moves it
    assert hinted_members(7, 0, 0, 6, (1.0, 1.0)) == frozenset(range(6))
    assert hinted_members(7, 0, 0, 6, (0.0, 0.0)) == frozenset()
    assert len(hinted_members(1, 0, 0, 16, (0.5, 0.5))) == 8
    for bad in ((0.6, 0.5), (-0.1, 0.2), (0.2, 1.5), (0.3,)):
        with pytest.raises(FieldError):
            RolloutSection(hint_ratio=bad)
    with pytest.raises(FieldError, match="generate"):
        RolloutSection(hint_ratio=(0.25, 0.5), action_mode="admissible")


def test_the_capability_hint_guides_without_the_solution_calls() -> None:
    env = capability_env()
    env.reset(11)
    hint = env.hint()
    assert hint and env.scenario.gold_calls
    assert gives_away(hint, env.scenario.gold_calls) is None
    assert not any(call.name in hint for call in env.scenario.gold_calls)
    assert parse_tool_call(hint) is None  # no call in either spelling
    native = capability_env("native")
    native.reset(11)
    assert native.hint() == hint  # guidance reads the same whichever way the tools are given
    assert LetterEnv().hint() is None  # the protocol's default: no hint


def _written(env: CapabilityEnvironment) -> list[str]:
    """The seed's gold calls as an agent writes them, in both call formats."""
    assert env.scenario is not None
    return [format_call(c.name, c.arguments, f) for c in env.scenario.gold_calls for f in CALL_FORMATS]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_no_shipped_environment_s_hint_contains_a_gold_call(path: Path) -> None:
    """Every environment the repository ships (the library the pipeline and `synth env` use) has a written hint
    that, on every seed, holds none of the seed's gold calls: neither written out in either call format, nor the JSON
    of a call, nor a tool's name with the call's argument values."""
    program = load_environment(str(path))
    assert path.read_text(encoding="utf-8").count("\n  hint \"") == 1  # written, not derived
    env = CapabilityEnvironment(program)
    for seed in range(40):
        env.reset(seed)
        hint, calls = env.hint() or "", env.scenario.gold_calls
        assert hint == program.env.hint and calls
        assert gives_away(hint, calls) is None, (seed, hint)
        assert not any(text in hint for text in _written(env))
        assert not any(json.dumps({"name": c.name, "arguments": c.arguments}) in hint for c in calls)
        assert not any(c.name in hint for c in calls)  # the written hints name no tool at all


def test_the_derived_hint_names_no_tool_and_follows_the_solution_s_shape() -> None:
    source = SHIPPED[0].read_text(encoding="utf-8")
    without = "\n".join(line for line in source.splitlines() if not line.startswith("  hint "))
    program = compile_environment(without)
    assert program.env.hint is None and program.hint
    env = CapabilityEnvironment(program)
    for seed in range(20):
        env.reset(seed)
        assert gives_away(program.hint, env.scenario.gold_calls) is None
        assert not any(name in program.hint for name in program.tools)
    assert derived_hint([], reports=False) is None  # nothing to do, nothing to say
    looks = derived_hint(["query", "mutate", "mutate"], reports=True) or ""
    assert "look up" in looks and "More than one change" in looks and "the value they asked for" in looks
    just_change = derived_hint(["mutate"], reports=False) or ""
    assert "look up" not in just_change and "More than one" not in just_change
    assert "Nothing needs to change" in (derived_hint(["query"], reports=True) or "")


@pytest.mark.parametrize("hint", [
    "Call cancel_pending_order(order_id='{order}', reason='ordered by mistake').",
    '<tool_call>{{"name": "get_order_details", "arguments": {{"order_id": "{order}"}}}}</tool_call>',
    '{{"name": "get_order_details", "arguments": {{"order_id": "{order}"}}}}',
    "<action>get_order_details(order_id={order})</action>",
    "Use get_order_details on {order} first.",
    "Step 1: get_order_details (the order).",
])
def test_a_hint_that_gives_a_gold_call_away_fails_validation(hint: str) -> None:
    source = (REPO / "examples/envs/precondition_verification.rubric").read_text(encoding="utf-8")
    program = compile_environment(source)
    order = program.scenario(0).gold_calls[0].arguments["order_id"]
    written = hint.format(order=order).replace("\\", "\\\\").replace('"', '\\"')
    leaking = compile_environment("\n".join(
        f'  hint "{written}"' if line.startswith("  hint ") else line for line in source.splitlines()))
    report = validate(leaking, seeds=1)
    assert not report.ok and "the hint gives away the solution's call" in (report.reason or "")
    assert gives_away(leaking.hint, leaking.scenario(0).gold_calls) is not None


def test_a_hint_may_name_what_to_check_without_giving_the_call() -> None:
    calls = (ToolCall(name="cancel_pending_order", arguments={"order_id": "O7", "reason": "ordered by mistake"}),
             ToolCall(name="list_orders", arguments={}))
    assert gives_away("Check whether the order is still pending before you cancel anything.", calls) is None
    assert gives_away("Order O7 is the one; the reason is ordered by mistake.", calls) is None  # values, no tool
    assert gives_away("cancel_pending_order with O7, ordered by mistake", calls) == calls[0]  # the tool and its values
    assert gives_away("Start with list_orders.", calls) == calls[1]  # a call of no arguments is its name
    assert gives_away("Order O77 via cancel_pending_order, ordered by mistake", calls) is None  # O7 is not in O77


def test_a_hinted_episode_learns_on_the_plain_prompt(tiny: Policy) -> None:
    engine, template = _engine(tiny, capability_env, hint_ratio=(1.0, 1.0))
    episodes = engine.run([GroupTask(group=0, seed=11)], group_size=2, seed=7, iteration=2)
    env = capability_env()
    plain = template.prompt_ids(env.system_prompt, env.reset(11))
    sampler = engine.sampler
    for key, episode in enumerate(episodes):
        assert episode.hinted
        seen = tiny.tokenizer.decode(sampler.contexts[key])
        assert "<expert_guidance>" in seen and env.hint() in seen  # the sampler saw the hint...
        ids = episode.token_ids.tolist()
        assert ids[:len(plain)] == plain  # ...the learner sees the plain prompt, then the turns as sampled
        assert ids[len(plain):len(plain) + len(sampler.turns[key])] == sampler.turns[key]
        assert "expert_guidance" not in tiny.tokenizer.decode(ids)
        length = len(ids)
        assert len(episode.sampler_logprobs) == len(episode.step_of_token) == len(episode.sampled) == length
        assert not episode.sampled[:len(plain)].any() and (episode.step_of_token[:len(plain)] == -1).all()
        assert (episode.sampler_logprobs[:len(plain)] == 0).all()
        turn = sampler.turns[key]
        assert episode.sampled[len(plain):len(plain) + len(turn)].all()


def test_without_a_hint_the_episodes_are_plain(tiny: Policy) -> None:
    """LetterEnv offers no hint: at hint_ratio [1, 1] its episodes are those of [0, 0]."""
    tasks = [GroupTask(group=0, seed=3), GroupTask(group=1, seed=4)]
    on = _engine(tiny, LetterEnv, hint_ratio=(1.0, 1.0))[0].run(tasks, group_size=3, seed=0, iteration=1)
    off = _engine(tiny, LetterEnv)[0].run(tasks, group_size=3, seed=0, iteration=1)
    assert not any(e.hinted for e in on)
    assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(on, off, strict=True))


def test_hinted_sequences_get_plain_old_logprobs_and_weight_one() -> None:
    policy = Policy.load("tiny", LoraSection(rank=4), seed=0)
    batch = synthetic_batch(policy)
    batch = [dataclasses.replace(s, hinted=i % 2 == 0) for i, s in enumerate(batch)]
    learner = Learner(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0), config_from_dict({}),
                      Distributed(), TokenUnits())
    corrected = learner.off_policy_correction(batch, cap=3.0)
    for before, after in zip(batch, corrected, strict=True):
        assert not np.allclose(after.old_logprobs[after.loss_mask], before.old_logprobs[before.loss_mask])
        if before.hinted:
            assert after.weight == 1.0 and after.hinted


def test_a_run_with_hints_trains_and_reports_the_hinted_share(tmp_path: Path) -> None:
    rubric = Path(__file__).resolve().parents[2] / "examples" / "envs" / "tool_calling_precision.rubric"
    config = load_config(None, ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8",
                                "rollout.group_size=4", "rollout.groups_per_batch=2", "rollout.max_new_tokens=16",
                                "rollout.max_context_tokens=2048", "optim.lr=3e-3", "iterations=1",
                                f"env.capability.path={rubric}", "env.call_format=text", "env.max_turns=2",
                                "rollout.hint_ratio=[0.5, 0.5]",
                                "advantage.filter_constant_groups=false"])
    result = train(config, out=tmp_path)
    assert result.metrics[0]["hinted_fraction"] == 0.5
    assert result.metrics[0]["optimizer_steps"] >= 1
