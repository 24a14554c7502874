"""SFT-gold: the gold episodes succeed, the loss reads exactly their action tokens, training lowers it, and the
adapter it saves loads and makes the gold calls likelier; a finished run is found again, an interrupted one
continues."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numerics import float64_model, forward_roundings, forward_size, rounding_error
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.capability.episode import appears
from tracec.trace_rl.envs.toolcall import format_call
from tracec.trace_rl.grpo import training
from tracec.trace_rl.grpo.config import TrainConfig, config_from_dict
from tracec.trace_rl.policy.catalog import ModelError, resolve_model
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.policy.tiny import build_tokenizer
from tracec.trace_rl.rollouts.engine import EpisodeRollout
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.targeting.gold_sft import GoldSFTSettings, action_nll, gold_episodes, pack_actions, train_gold_sft
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
from transformers import AutoTokenizer

from tracec.config_io import ConfigError, FieldError

REPO = Path(__file__).resolve().parents[2]
# The two shipped environments whose gold episodes are shortest in the tiny model's characters.
ENVS = [REPO / "examples/envs/datetime_reasoning.rubric", REPO / "examples/envs/precondition_verification.rubric"]
CONTEXT, TURN = 4096, 256  # a character a token: room for the episodes and for a JSON call

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config() -> TrainConfig:
    return config_from_dict({"model": {"name": "tiny"}, "lora": {"rank": 8, "alpha": 16},
                             "rollout": {"max_context_tokens": CONTEXT, "max_new_tokens": TURN}})


def _episodes(path: Path, tasks: int, *, context: int = CONTEXT, turn: int = TURN) -> list[EpisodeRollout]:
    return gold_episodes(build_tokenizer(max_positions=4096), path, settings=GoldSFTSettings(tasks=tasks),
                         rollout=RolloutSection(max_context_tokens=context, max_new_tokens=turn))


def _direct_nll(model: torch.nn.Module, episode: EpisodeRollout) -> tuple[float, int]:
    """-sum log p of the loss tokens with a plain forward over the whole episode, and their count."""
    ids = torch.from_numpy(episode.token_ids)[None]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)  # (T, V)
    positions = np.flatnonzero(episode.loss_mask)
    return -float(sum(logp[i - 1, int(episode.token_ids[i])] for i in positions)), len(positions)


def _forward_error(model: torch.nn.Module, episodes: list[EpisodeRollout], nll: float, dtype: torch.dtype) -> float:
    """The rule's bound (tests/numerics.py) for one forward's error in a token's log-prob, over the longest episode,
    at the size of the forward's values and of the mean NLL (a mean of tokens' errors is no larger than the worst)."""
    size = max(nll, *(forward_size(model, torch.from_numpy(e.token_ids)[None]) for e in episodes))
    return rounding_error(forward_roundings(model.config, max(len(e.token_ids) for e in episodes)), size, dtype)


def _first_call_only(episode: EpisodeRollout) -> EpisodeRollout:
    """The episode with only its first turn's action tokens as loss tokens."""
    return dataclasses.replace(episode, step_of_token=np.where(episode.step_of_token == 0, 0, -1).astype(np.int32))


def test_the_gold_episodes_succeed_and_their_loss_tokens_are_exactly_the_gold_turns() -> None:
    tokenizer = build_tokenizer(max_positions=4096)
    for path in ENVS:
        episodes = _episodes(path, tasks=3)
        env = CapabilityEnvironment(load_environment(str(path)))
        for episode in episodes:
            assert episode.success and episode.reward == 1.0 and not episode.truncated
            scenario = env.program.scenario(episode.seed)
            calls = [format_call(c.name, c.arguments, env.call_format) for c in scenario.gold_calls]
            assert episode.turns == len(calls) + 1  # the calls, then the message to the user
            ids, steps = episode.token_ids, episode.step_of_token
            for turn in range(episode.turns):
                text = tokenizer.decode(ids[steps == turn].tolist())
                if turn < len(calls):
                    assert text == calls[turn]
                else:  # the closing message tells every value the task asks for
                    assert all(appears(value, text) for value in scenario.report)
            # Each turn's loss tokens are its sampled tokens less the end-of-turn token; nothing else is a loss token.
            assert not (episode.loss_mask & ~episode.sampled).any()
            assert int(episode.sampled.sum()) == int(episode.loss_mask.sum()) + episode.turns
            closers = ids[episode.sampled & ~episode.loss_mask]
            assert set(closers.tolist()) == {tokenizer.eos_token_id}
        packed = pack_actions(episodes, row_tokens=4096, pad_id=0)
        assert packed.target_ids.tolist() == np.concatenate([e.token_ids[e.loss_mask] for e in episodes]).tolist()


def test_with_smollm2s_tokenizer_every_shipped_environment_plays_its_gold_episodes_in_the_default_rollout() -> None:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"), local_files_only=True)
    for path in sorted((REPO / "examples/envs").glob("*.rubric")):
        episodes = gold_episodes(tokenizer, path, settings=GoldSFTSettings(tasks=4), rollout=RolloutSection())
        assert all(e.success and not e.truncated for e in episodes), path.name
        env = CapabilityEnvironment(load_environment(str(path)))
        first = env.program.scenario(0).gold_calls[0]
        steps = episodes[0].step_of_token
        assert tokenizer.decode(episodes[0].token_ids[steps == 0].tolist()) == \
            format_call(first.name, first.arguments, env.call_format)


def test_the_loss_is_minus_the_mean_log_likelihood_of_the_action_tokens() -> None:
    policy = Policy.load("tiny", LoraSection(rank=4), seed=0)
    with torch.no_grad():  # a non-zero adapter, so that the adapted path is what is compared
        generator = torch.Generator().manual_seed(1)
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
    float64_model(policy.model)  # packed and plain forwards: in fp64 they agree to fp64 rounding
    episodes = _episodes(ENVS[0], tasks=2)
    expected = [_direct_nll(policy.model, e) for e in episodes]
    want = sum(n for n, _ in expected) / sum(c for _, c in expected)
    close = 2 * _forward_error(policy.model, episodes, want, torch.float64)  # two forwards, one each way
    for micro_batch_tokens in (10**6, 1):  # one micro-batch, or one per episode: the same sum
        total, count = action_nll(policy, episodes, row_tokens=4096, micro_batch_tokens=micro_batch_tokens)
        assert count == sum(c for _, c in expected)
        assert total / count == pytest.approx(want, abs=close)


def test_training_lowers_the_loss_and_saves_an_adapter_that_makes_the_gold_calls_likelier(tmp_path: Path) -> None:
    config, out = _config(), tmp_path / "sft"
    settings = GoldSFTSettings(epochs=3, lr=1e-2, tasks=2, mini_batch=4)  # all 4 episodes in one step an epoch
    adapter = train_gold_sft(config, ENVS, out, settings=settings)
    assert adapter == out / "checkpoints" / "iter_000003" / "adapter"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    losses = [m["loss"] for m in metrics]
    assert losses[0] > losses[1] > losses[2]
    episodes = [e for path in ENVS for e in _episodes(path, tasks=2)]
    # The first epoch's loss is measured before its only step: the base model's (LoRA's B starts at 0).
    base = Policy.load("tiny", config.lora, seed=0)
    float64_model(base.model)
    direct = [_direct_nll(base.model, e) for e in episodes]
    assert metrics[0]["tokens"] == sum(c for _, c in direct)
    # the trainer's fp32 forwards against these fp64 ones: the rule's fp32 bound, ~3e-3, where an epoch's step
    # moves the loss by ~9e-2
    want = sum(n for n, _ in direct) / metrics[0]["tokens"]
    assert losses[0] == pytest.approx(want, abs=_forward_error(base.model, episodes, want, torch.float32))

    loaded = PeftAdapters.load("tiny", {"sft": adapter})
    first_calls = [_first_call_only(e) for e in episodes]
    likelihood = {}
    for name in (None, "sft"):
        with loaded.active(name):
            total, count = action_nll(loaded.policy, first_calls, row_tokens=4096, micro_batch_tokens=10**6)
        likelihood[name] = -total / count
    assert likelihood["sft"] > likelihood[None]

    # Asked again with the same inputs, the finished adapter is found, not trained again.
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert train_gold_sft(config, ENVS, out, settings=settings) == adapter
    unread = config.replace(rollout=dataclasses.replace(config.rollout, group_size=4))  # no part of the gold episodes
    assert train_gold_sft(unread, ENVS, out, settings=settings) == adapter
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    marker = json.loads((out / "gold_sft.json").read_text())
    assert marker["finished"] and marker["adapter"] == "checkpoints/iter_000003/adapter"
    assert marker["episodes"] == 4 and marker["tokens"] == metrics[0]["tokens"]

    # Other settings: trained afresh, the old run's checkpoints and metrics gone.
    again = train_gold_sft(config, ENVS, out, settings=dataclasses.replace(settings, epochs=1))
    assert again == out / "checkpoints" / "iter_000001" / "adapter" and not adapter.exists()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1


def test_an_interrupted_run_continues_from_its_last_epoch_to_the_same_adapter(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    config, settings = _config(), GoldSFTSettings(epochs=2, lr=1e-2, tasks=2, mini_batch=1)
    whole = train_gold_sft(config, ENVS[:1], tmp_path / "whole", settings=settings)
    saved: list[Path] = []
    real_save = training.save_checkpoint  # the set-up SFT-gold shares with the GRPO trainer

    def save_then_die(*args: object, **kwargs: object) -> Path:
        if saved:
            raise KeyboardInterrupt  # killed after the first epoch's checkpoint
        saved.append(real_save(*args, **kwargs))  # type: ignore[arg-type]
        return saved[-1]

    monkeypatch.setattr(training, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_gold_sft(config, ENVS[:1], tmp_path / "cut", settings=settings)
    monkeypatch.undo()
    assert not json.loads((tmp_path / "cut" / "gold_sft.json").read_text())["finished"]
    resumed = train_gold_sft(config, ENVS[:1], tmp_path / "cut", settings=settings)
    metrics = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert (resumed / "adapter_model.safetensors").read_bytes() == (whole / "adapter_model.safetensors").read_bytes()


def test_a_gold_episode_that_cannot_be_played_as_a_rollout_is_an_error_naming_it() -> None:
    episode = _episodes(ENVS[0], tasks=1)[0]
    prompt = int(np.argmax(episode.sampled))  # the first prompt's tokens
    with pytest.raises(ConfigError, match=r"datetime_reasoning\.rubric: the gold episode of task seed 0 does not fit "
                                          r"rollout\.max_context_tokens"):
        _episodes(ENVS[0], tasks=1, context=prompt + 300)
    with pytest.raises(ConfigError, match=r"datetime_reasoning\.rubric: turn 1 of the gold episode of task seed 0: "
                                          r"the scripted turn takes \d+ tokens.*raise rollout\.max_new_tokens"):
        _episodes(ENVS[0], tasks=1, turn=16)
    with pytest.raises(ConfigError, match="no such capability environment file"):
        _episodes(ENVS[0].with_name("missing.rubric"), tasks=1)


def test_settings_are_checked_and_a_folder_of_another_run_is_refused(tmp_path: Path) -> None:
    wrong: dict[str, Any] = {"epochs": 0, "lr": 0.0, "tasks": 0, "first_seed": -1, "mini_batch": 0}
    for field, value in wrong.items():
        with pytest.raises(FieldError, match=f"^{field} = "):
            dataclasses.replace(GoldSFTSettings(), **{field: value})
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="holds a run that is not an SFT-gold one"):
        train_gold_sft(_config(), ENVS[:1], tmp_path, settings=GoldSFTSettings(tasks=1))


def test_a_cuda_device_without_cuda_is_refused_before_the_folder_is_touched(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA, on any machine
    config = config_from_dict({"model": {"name": "tiny", "device": "cuda"}, "lora": {"rank": 8, "alpha": 16}})
    with pytest.raises(ModelError, match="model.device cuda: torch sees no CUDA device"):
        train_gold_sft(config, ENVS[:1], tmp_path / "run", settings=GoldSFTSettings(tasks=1))
    assert not (tmp_path / "run").exists()
