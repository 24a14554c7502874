"""The trainer end to end on the CPU: a few iterations with the tiny model, GRPO and TRCA, on a shipped capability
environment and a toy one; exact resume after SIGKILL; the DDP launch; the command line's errors."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from numerics import forward_roundings, forward_size, tolerance
from safetensors.torch import load_file
from tracec.cli import main as cli_main
from tracec.trace_rl.grpo.config import ConfigError, TrainConfig, load_config
from tracec.trace_rl.grpo.run_folder import latest_checkpoint
from tracec.trace_rl.grpo.train import train
from tracec.trace_rl.policy.model import Policy

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TINY = ["model.name=tiny", "model.threads=1", "lora.rank=4", "lora.alpha=8", "rollout.group_size=4",
        "rollout.groups_per_batch=2", "rollout.max_new_tokens=16", "rollout.max_context_tokens=1024", "optim.lr=3e-3",
        "checkpoint_every=1"]
LETTERS = ["env.kind=python", "env.python.factory=toy_env:letter_env"]
CAPABILITY = [f"env.capability.path={REPO}/examples/envs/tool_calling_precision.rubric", "env.max_turns=2",
              "env.call_format=text"]  # the native format: test_native_tools.py


def _config(*overrides: str) -> TrainConfig:
    return load_config(None, [*TINY, *overrides])


def _adapter(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def _fp32_forward_tolerance(length: int) -> float:
    """The rule's bound (tests/numerics.py) for a log-prob computed by two fp32 forwards of the tiny policy over
    `length` positions, at the size of the forward's values and of its log-probs (measured on random tokens). These
    runs train in fp32: `model.dtype` takes no float64."""
    policy = Policy.load("tiny", _config().lora, seed=0)
    ids = torch.randint(0, policy.model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=ids).logits, dim=-1)
    size = max(forward_size(policy.model, ids), float(logp.abs().max()))
    return tolerance(forward_roundings(policy.model.config, length), size, torch.float32)


def _initial_adapter() -> dict[str, torch.Tensor]:
    return {k: v for k, v in Policy.load("tiny", _config().lora, seed=0).adapter_state().items()}


def test_grpo_on_a_toy_environment_trains_and_records_everything(tmp_path: Path) -> None:
    config = _config(*LETTERS, "iterations=3", "keep_checkpoints=2", "loss.kl_beta=0.05")
    # the first step's ratio: the trainer's log-prob over the sampler's, two fp32 forwards (~5e-7 apart here); a
    # step moves it by ~5e-2
    bound = _fp32_forward_tolerance(config.rollout.max_context_tokens)
    seen: list[dict] = []  # type: ignore[type-arg]
    result = train(config, out=tmp_path, on_iteration=seen.append)
    assert [m["iteration"] for m in result.metrics] == [1, 2, 3] == [m["iteration"] for m in seen]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == result.metrics
    for record in lines:
        assert 0 <= record["reward_mean"] <= 1 and 0 <= record["clip_fraction"] <= 1 and record["kl"] >= 0
        assert record["groups_trained"] == 2 and record["optimizer_steps"] == 2  # rewards differ within groups
        assert record["time_rollout"] > 0 and record["tokens_per_s"] > 0 and record["entropy"] > 0
        learning = [record[f"time_{phase}"] for phase in ("forward", "backward", "optimizer")]
        assert min(learning) > 0 and sum(learning) <= record["time_learn"] and record["time_old_logprobs"] >= 0
        first, second = record["steps"]  # each optimizer step's trust region, measured before it
        assert first["ratio_max"] == pytest.approx(1.0, abs=bound) and abs(second["ratio_max"] - 1.0) > bound
        assert record["ratio_p99"] == max(first["ratio_p99"], second["ratio_p99"]) >= record["ratio_p50"]
        assert second["approx_kl"] > 0 and first["grad_norm"] > 0 and not record["early_stopped"]
        assert record["no_signal"] is False
    assert lines[-1]["kl"] > 0  # the adapter has moved away from the base
    # checkpoints: the newest two, each whole, with the run's config beside it
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000002", "iter_000003"]
    # the checkpoint's config names the folder the run wrote to (`out=`), not the config's run.out
    saved = load_config(tmp_path / "checkpoints" / "iter_000003" / "config.toml")
    assert saved == config.replace(run=dataclasses.replace(config.run, out=str(tmp_path.resolve())))
    moved = _adapter(tmp_path / "checkpoints" / "iter_000003")
    assert any(not torch.equal(moved[k], v) for k, v in _initial_adapter().items())
    assert (tmp_path / "curve.png").stat().st_size > 1000
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        train(config, out=tmp_path)


def test_grpo_with_sparse_rewards_skips_constant_groups_and_resamples(tmp_path: Path) -> None:
    # The tiny model never solves the booking task: every group's reward is 0, so no group teaches anything.
    config = _config(*CAPABILITY, "iterations=1", "advantage.max_resample_batches=2")
    result = train(config, out=tmp_path)
    (record,) = result.metrics
    assert record["constant_fraction"] == 1.0 and record["groups_trained"] == 0
    assert record["resample_batches"] == 2 and record["optimizer_steps"] == 0
    assert all(torch.equal(_adapter(tmp_path / "checkpoints" / "iter_000001")[k], v)
               for k, v in _initial_adapter().items())


def test_trca_gives_an_all_failed_group_step_advantages_to_learn_from(tmp_path: Path) -> None:
    config = _config(*CAPABILITY, "iterations=2", "advantage.kind=trca",
                     f"advantage.rubric={REPO}/examples/toolenv.rubric", "optim.epochs=2")
    result = train(config, out=tmp_path)
    for record in result.metrics:
        assert record["success_rate"] == 0.0 and record["groups_trained"] == 2
        assert record["optimizer_steps"] == 4 and 0 < record["ratio"] < 2
    moved = _adapter(tmp_path / "checkpoints" / "iter_000002")
    assert any(not torch.equal(moved[k], v) for k, v in _initial_adapter().items())


def _toml(tmp_path: Path, *overrides: str) -> Path:
    from tracec.trace_rl.grpo.config import save_config

    path = tmp_path / "train.toml"
    save_config(_config(*LETTERS, *overrides), path)
    return path


def _run(args: list[str], **kwargs: object) -> subprocess.Popen:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tracec.cli", "train", *args, "--quiet"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


@pytest.mark.slow
def test_resuming_over_a_damaged_checkpoint_names_it(tmp_path: Path) -> None:
    config = _config(*LETTERS, "iterations=2", "checkpoint_every=1", "keep_checkpoints=0")
    train(config, out=tmp_path)
    damaged = tmp_path / "checkpoints" / "iter_000002"
    (damaged / "trainer_state.pt").write_bytes(b"")  # a write cut short
    with pytest.raises(ConfigError, match=r"iter_000002: error: --resume: the checkpoint is damaged \(EOFError"):
        train(config.replace(run=dataclasses.replace(config.run, iterations=3)), out=tmp_path, resume=True)


def test_a_run_killed_mid_iteration_resumes_to_the_same_adapter(tmp_path: Path) -> None:
    config = _toml(tmp_path, "iterations=4", "optim.mini_batches=2")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert _run([str(config), "--out", str(whole)]).wait(timeout=600) == 0
    process = _run([str(config), "--out", str(killed)])
    deadline = time.monotonic() + 600
    while not (killed / "checkpoints" / "iter_000002").exists():  # published by one rename: whole when seen
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # iteration 3 is under way
    process.wait()
    assert latest_checkpoint(killed) == killed / "checkpoints" / "iter_000002"
    assert _run([str(config), "--out", str(killed), "--resume"]).wait(timeout=600) == 0
    a, b = _adapter(whole / "checkpoints" / "iter_000004"), _adapter(killed / "checkpoints" / "iter_000004")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    rewards = [[json.loads(line)["reward_mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
               for run in (whole, killed)]
    assert rewards[0] == rewards[1] and len(rewards[0]) == 4


@pytest.mark.slow
def test_torchrun_with_two_gloo_ranks_trains_like_one_process(tmp_path: Path) -> None:
    config = _toml(tmp_path, "iterations=2", "rollout.groups_per_batch=4")
    one, two = tmp_path / "one", tmp_path / "two"
    assert _run([str(config), "--out", str(one)]).wait(timeout=600) == 0
    # faulthandler on: a rank aborted after the bound prints every thread's stack, so a hang fails with where it hung
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    ranks = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                              "-m", "tracec.cli", "train", str(config), "--out", str(two), "--quiet"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, printed = ranks.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(ranks.pid, signal.SIGABRT)  # torchrun and both ranks
        _, printed = ranks.communicate()
        pytest.fail(f"a rank did not exit within 300 s; the stacks:\n{printed[-8000:]}")
    assert ranks.returncode == 0, printed[-2000:]
    a, b = _adapter(one / "checkpoints" / "iter_000002"), _adapter(two / "checkpoints" / "iter_000002")
    start = _initial_adapter()
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-5
    metrics = [[json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] for run in (one, two)]
    for x, y in zip(*metrics):
        assert x["reward_mean"] == pytest.approx(y["reward_mean"], abs=tolerance(16 + 1, 1.0, float))  # a mean of 16
        assert x["groups_trained"] == y["groups_trained"] == 4


def test_the_command_line_reports_user_errors_in_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[rollout]\ngroup_size = 1\n", encoding="utf-8")
    assert cli_main(["train", str(bad)]) == 1
    assert f"{bad}:2:1: error: rollout.group_size = 1" in capsys.readouterr().err
    assert cli_main(["train", str(bad), "--set", "rollout.group_size=4", "--set", "model.name=no-such-model"]) == 1
    assert "no model 'no-such-model'" in capsys.readouterr().err
    assert cli_main(["train", str(tmp_path / "missing.toml")]) == 1
    assert "no such config file" in capsys.readouterr().err
    assert cli_main(["train", str(bad), "--bogus"]) == 2
    tools = ["--set", f"env.capability.path={REPO}/examples/envs/tool_calling_precision.rubric"]  # checked first
    long = ["--set", "rollout.group_size=4", "--set", "model.name=tiny", "--set", "rollout.max_context_tokens=5000",
            *tools, "--out", str(tmp_path / "long")]
    assert cli_main(["train", str(bad), *long]) == 1
    assert "the model 'tiny' has 4096 positions; use at most 4096" in capsys.readouterr().err
    gpu = ["--set", "rollout.group_size=4", "--set", "model.name=tiny", "--set", "model.device=cuda", *tools, "--out",
           str(tmp_path / "gpu")]
    if not torch.cuda.is_available():
        assert cli_main(["train", str(bad), *gpu]) == 1
        assert "model.device cuda: torch sees no CUDA device" in capsys.readouterr().err
    other = ["--set", "rollout.group_size=4", "--set", "model.name=tiny", "--set", "advantage.kind=trca",
             "--set", f"env.capability.path={REPO}/examples/envs/tool_calling_precision.rubric", "--set",
             "env.kind=capability", "--set", f"advantage.rubric={REPO}/examples/household.rubric",
             "--out", str(tmp_path / "other")]
    assert cli_main(["train", str(bad), *other]) == 1  # a rubric for another schema: said before any rollout
    err = capsys.readouterr().err
    assert "its schema 'alfworld' reads the state fields" in err and "Traceback" not in err
    assert not (tmp_path / "other" / "metrics.jsonl").exists()
    short = ["--set", "rollout.group_size=4", "--set", "model.name=tiny", "--set", "env.kind=capability", "--set",
             f"env.capability.path={REPO}/examples/envs/tool_calling_precision.rubric", "--set",
             "rollout.max_context_tokens=256", "--out", str(tmp_path / "short")]
    assert cli_main(["train", str(bad), *short]) == 1  # the tools' prompt cannot fit: said before any rollout
    err = capsys.readouterr().err
    assert "leaves no room for a turn" in err and "raise rollout.max_context_tokens" in err and "Traceback" not in err
    assert not (tmp_path / "short" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_smollm2_trains_an_iteration_on_a_capability_environment(tmp_path: Path) -> None:
    config = load_config(REPO / "examples" / "train" / "tool_calling_trca.toml",
                         ["iterations=1", "rollout.group_size=2", "rollout.max_new_tokens=24", "env.max_turns=2"])
    result = train(config, out=tmp_path)
    (record,) = result.metrics
    assert record["groups_trained"] == 2 and record["optimizer_steps"] == 2 and np.isfinite(record["loss"])
    assert (tmp_path / "checkpoints" / "iter_000001" / "adapter" / "adapter_config.json").is_file()


def test_vllm_gets_the_checkpoint_without_its_gguf_quantization_config(tmp_path: Path) -> None:
    from tracec.trace_rl.llm.vllm_backend import clean_model_folder
    from tracec.trace_rl.policy.catalog import resolve_model

    source = resolve_model("smollm2-135m-instruct")
    folder = clean_model_folder(source, tmp_path / "base")
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (folder / "model.safetensors").resolve() == (source / "model.safetensors").resolve()
    assert {p.name for p in folder.iterdir()} == {p.name for p in source.iterdir()}


@pytest.mark.slow
def test_the_textworld_example_trains_on_a_family_of_games_with_trca(tmp_path: Path) -> None:
    config = load_config(REPO / "examples" / "train" / "textworld_grpo.toml", [
        *TINY, "iterations=1", "env.max_turns=2", f"env.textworld.cache={tmp_path / 'games'}", "advantage.kind=trca",
        f"advantage.rubric={REPO}/examples/textworld.rubric", "rollout.max_context_tokens=4096"])
    result = train(config, out=tmp_path / "run")
    (record,) = result.metrics
    assert len(list((tmp_path / "games").rglob("*.z8"))) == 2  # one game per seed of the batch
    assert record["groups_trained"] == 2 and record["optimizer_steps"] == 2 and record["turns_mean"] == 2


@pytest.mark.slow
def test_a_tau2_domain_trains_with_a_scripted_user(tmp_path: Path, data_dir: Path) -> None:
    # SmolLM2: the domain's policy and tools make a system prompt of ~10k characters, too long for the tiny
    # model's character tokens
    config = _config("model.name=smollm2-135m-instruct", "env.kind=tau2", f"env.tau2.data={data_dir}",
                     "env.tau2.user=scripted", "env.max_turns=2", "iterations=1", "rollout.group_size=2",
                     "rollout.groups_per_batch=1", "advantage.kind=trca",
                     f"advantage.rubric={REPO}/examples/tau2.rubric", "rollout.max_context_tokens=8192")
    result = train(config, out=tmp_path)  # one group of two: each ~3k-token episode costs SmolLM2 ~50 s on a core
    (record,) = result.metrics
    assert record["turns_mean"] == 2  # the scripted user never ends the conversation
    assert record["groups_trained"] + record["constant_fraction"] == 1  # a count, and k / 1: exact
    assert 0.0 <= record["reward_mean"] <= 1.0


def _save(tmp_path: Path, *overrides: str) -> Path:
    from tracec.trace_rl.grpo.config import save_config

    path = tmp_path / "train.toml"
    save_config(_config(*overrides), path)
    return path


def _events(folder: Path) -> list[Path]:
    return sorted(folder.glob("events.out.tfevents.*"))


def _tensorboard_scalars(folder: Path) -> dict[int, dict[str, float]]:
    """step -> tag -> value over the event files of `folder`, read as TensorBoard does: files in the order they were
    begun, and a file's purge (a session START at step s) drops what earlier files logged from step s on."""
    from tensorboardX.proto.event_pb2 import Event, SessionLog

    def records(path: Path) -> list[Event]:
        data, events, at = path.read_bytes(), [], 0
        while at < len(data):  # TFRecord: length (8 bytes), its CRC (4), the record, its CRC (4)
            length = int.from_bytes(data[at:at + 8], "little")
            events.append(Event.FromString(data[at + 12:at + 12 + length]))
            at += 16 + length
        return events

    files = sorted((records(path) for path in _events(folder)), key=lambda events: events[0].wall_time)
    steps: dict[int, dict[str, float]] = {}
    for events in files:
        for event in events:
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                steps = {step: tags for step, tags in steps.items() if step < event.step}
            for value in event.summary.value:
                steps.setdefault(event.step, {})[value.tag] = value.simple_value
    return steps


def test_a_non_finite_update_stops_the_run_with_a_located_error_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _save(tmp_path, *LETTERS, "iterations=1")
    for setting, said in (("loss.kl_beta=1e300", "the loss is nan: ratio 1.0"),
                          ("optim.weight_decay=1e300", "the adapter's weights are not finite after the step")):
        out = tmp_path / setting.partition("=")[0]
        assert cli_main(["train", str(config), "--set", setting, "--out", str(out), "--quiet"]) == 1
        err = capsys.readouterr().err
        assert f"{out}: error: iteration 1, optimizer step 1: {said}" in err, err
        assert f"{setting.replace('=', ' = ').replace('1e300', '1e+300')}" in err and "Traceback" not in err
        assert "nothing of this iteration is saved, and no checkpoint was written" in err
        assert latest_checkpoint(out) is None and not (out / "metrics.jsonl").exists()


def test_a_run_that_diverges_after_a_checkpoint_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracec.trace_rl.grpo.learner import Learner

    update = Learner.update

    def nan_in_iteration_2(self, local, table, *, seed, iteration):  # type: ignore[no-untyped-def]
        if iteration == 1:  # advantages that are NaN: the loss of the first step is
            local = [dataclasses.replace(s, advantages=s.advantages * np.nan) for s in local]
        return update(self, local, table, seed=seed, iteration=iteration)

    monkeypatch.setattr(Learner, "update", nan_in_iteration_2)
    with pytest.raises(ConfigError, match=r"iteration 2, optimizer step 1: the loss is nan.*the newest checkpoint, "
                                          r".*iter_000001, is the last good one"):
        train(_config(*LETTERS, "iterations=3"), out=tmp_path)
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "iter_000001"
    assert all(torch.isfinite(v).all() for v in _adapter(tmp_path / "checkpoints" / "iter_000001").values())
    assert [json.loads(line)["iteration"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]


def test_a_run_without_a_learning_signal_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The tiny model never solves the booking task: every group is constant in both batches it samples.
    config = _save(tmp_path, *CAPABILITY, "iterations=1", "advantage.max_resample_batches=1")
    assert cli_main(["train", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "tracec train: warning: no group had a learning signal in its only iteration (2 batches of groups " \
        "sampled, resampling included)" in captured.err
    assert "0 optimizer steps were taken: the adapter is its initial state" in captured.err
    assert "1 iterations, 0 optimizer steps (no learning signal)" in captured.out
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["no_signal"] is True and record["optimizer_steps"] == 0 and record["resample_batches"] == 1


def test_resume_refuses_a_folder_that_holds_no_run_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _save(tmp_path, *LETTERS, "iterations=1")
    missing, foreign, lost = tmp_path / "missing", tmp_path / "foreign", tmp_path / "lost"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("another tool's\n")
    lost.mkdir()  # a run whose checkpoints/ was deleted
    (lost / "metrics.jsonl").write_text('{"iteration": 1, "reward_mean": 0.5}\n')
    for folder, why in ((missing, "it does not exist; drop --resume"), (foreign, "it holds no checkpoints/ folder"),
                        (lost, "it holds no checkpoints/ folder")):
        before = sorted((p.name, p.read_text()) for p in folder.iterdir()) if folder.exists() else None
        assert cli_main(["train", str(config), "--out", str(folder), "--resume", "--quiet"]) == 1
        err = capsys.readouterr().err
        assert f"{folder}: error: --resume: nothing to resume in {folder}: {why}" in err
        assert (sorted((p.name, p.read_text()) for p in folder.iterdir()) if folder.exists() else None) == before


@pytest.mark.parametrize("damage", ["empty folder", "garbage config", "unknown key"])
def test_resuming_over_an_unreadable_checkpoint_config_names_the_checkpoint(tmp_path: Path, damage: str) -> None:
    config = _config(*LETTERS, "iterations=2")
    checkpoint = tmp_path / "checkpoints" / "iter_000001"
    checkpoint.mkdir(parents=True)
    if damage != "empty folder":
        (checkpoint / "config.toml").write_text("garbage [[[" if damage == "garbage config" else "[bogus]\nx = 1\n")
    said = {"empty folder": "no such config file", "garbage config": "not valid TOML",
            "unknown key": "unknown key `bogus`"}[damage]
    with pytest.raises(ConfigError, match=rf"iter_000001: error: --resume: the checkpoint is damaged \(its "
                                          rf"config.toml: {said}.*\); delete that folder to resume from the "
                                          "checkpoint before it"):
        train(config, out=tmp_path, resume=True)


def test_a_resumed_run_may_run_longer_and_keep_more_checkpoints_but_not_change_what_it_learns(
        tmp_path: Path) -> None:
    from tracec.trace_rl.grpo.config import save_config
    from tracec.trace_rl.grpo.run_folder import check_run_dir

    checkpoint = tmp_path / "checkpoints" / "iter_000002"
    checkpoint.mkdir(parents=True)
    save_config(_config(*LETTERS, "iterations=2", "run.keep_checkpoints=3"), checkpoint / "config.toml")
    longer = _config(*LETTERS, "iterations=4", "run.keep_checkpoints=5")
    assert check_run_dir(tmp_path, longer, resume=True) == checkpoint
    with pytest.raises(ConfigError, match=r"the config differs from the run's .* in optim\.lr; only run\.iterations, "
                                          r"run\.keep_checkpoints and run\.report_to may change"):
        check_run_dir(tmp_path, _config(*LETTERS, "iterations=4", "optim.lr=1e-3"), resume=True)


def test_resume_drops_a_metrics_line_cut_short(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(*LETTERS, "iterations=1")
    train(config, out=tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    with open(metrics, "a") as handle:
        handle.write('{"iteration": 2, "reward_mean": 0.')  # killed while writing iteration 2's line
    result = train(config.replace(run=dataclasses.replace(config.run, iterations=2)), out=tmp_path, resume=True)
    assert f"{metrics}:2: warning: dropped its last line, cut short" in capsys.readouterr().err
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [1, 2] and lines == result.metrics


def test_tensorboard_gets_the_metrics_scalars_and_a_resume_appends(tmp_path: Path) -> None:
    config = _config(*LETTERS, "iterations=2", "keep_checkpoints=0", 'run.report_to=["tensorboard"]')
    train(config, out=tmp_path)
    (first,) = _events(tmp_path / "tensorboard")
    written = first.read_bytes()
    # Resume from iteration 1 (as if the run had been killed before iteration 2's checkpoint): 2 is run again.
    shutil.rmtree(tmp_path / "checkpoints" / "iter_000002")
    train(config.replace(run=dataclasses.replace(config.run, iterations=3)), out=tmp_path, resume=True)
    assert len(_events(tmp_path / "tensorboard")) == 2 and first.read_bytes() == written  # appended, not rewritten
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scalars = _tensorboard_scalars(tmp_path / "tensorboard")
    assert [r["iteration"] for r in records] == sorted(scalars) == [1, 2, 3]
    for record in records:
        expected = {f"train/{k}": float(v) for k, v in record.items()
                    if k != "iteration" and isinstance(v, (int, float))}
        assert "train/reward_mean" in expected and "train/no_signal" in expected
        assert scalars[record["iteration"]] == pytest.approx(expected, rel=1e-6)  # float32 in the event files
