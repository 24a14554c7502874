"""`tracec evaluate` and `tracec route` (which shares its model and target flags): adapter folders that cannot be
used (no weights, cut weights, another model's) are exit 1 naming the folder or file, in a line or two, never a
model hub lookup; every argument is checked before a model loads; one default simulated user for both verbs."""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from tracec.cli import evaluate, main, route
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.pipeline.config import Tau2TargetSection

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "examples" / "envs" / "precondition_verification.rubric"
WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny-model adapter as training saves it."""
    return Policy.load("tiny", LoraSection(), seed=1).save_adapter(tmp_path_factory.mktemp("adapter") / "a")


@pytest.fixture
def options(tmp_path: Path) -> Path:
    path = tmp_path / "options.json"
    path.write_text(json.dumps([{"name": "a", "label": "A", "description": "books rooms", "example": ""},
                                {"name": "base", "label": "B", "description": "anything else", "example": ""}]))
    return path


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model loader and the network, each failing the command (exit 3) and recorded if reached."""
    reached: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            reached.append(what)
            raise AssertionError(f"{what} was reached")
        return refused

    monkeypatch.setattr("tracec.trace_rl.targeting.peft_adapters.load_adapter_model", refuse("the model loader"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("the network"))
    monkeypatch.setattr(socket.socket, "connect", refuse("the network"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return reached


def _copy(adapter: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in ("adapter_config.json", WEIGHTS):
        (folder / name).write_bytes((adapter / name).read_bytes())
    return folder


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    return err


def _verbs(adapter: Path, options: Path, out: Path) -> list[list[str]]:
    model = ["--model", "tiny", "--adapter", f"a={adapter}", "--options", str(options)]
    return [["route", *model, "--task", "Please book room R1."],
            ["evaluate", *model, "--target", "capability", "--env", str(ENV), "--tasks", "1", "-o", str(out)]]


def test_a_folder_without_adapter_weights_is_named_and_no_hub_is_asked(
        adapter: Path, options: Path, tmp_path: Path, no_model: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "adapter_config.json").write_bytes((adapter / "adapter_config.json").read_bytes())
    for argv in _verbs(config_only, options, tmp_path / "out"):
        assert main(argv) == 1
        assert _error(capsys) == (f"{config_only}: not an adapter folder (adapter_config.json but no {WEIGHTS}); "
                                  "name the `adapter` folder of a training checkpoint")
    for argv in _verbs(tmp_path / "nowhere", options, tmp_path / "out"):
        assert main(argv) == 1
        assert _error(capsys).startswith(f"{tmp_path / 'nowhere'}: not an adapter folder (no such folder)")
    assert no_model == []


@pytest.mark.parametrize("keep", [5, 100, -200], ids=["no header", "cut in its header", "cut in its tensors"])
def test_a_cut_adapter_file_is_a_damaged_adapter(adapter: Path, options: Path, tmp_path: Path, keep: int,
                                                 no_model: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    damaged = _copy(adapter, tmp_path / "damaged")
    whole = (adapter / WEIGHTS).read_bytes()
    (damaged / WEIGHTS).write_bytes(whole[:keep])
    for argv in _verbs(damaged, options, tmp_path / "out"):
        assert main(argv) == 1
        said = _error(capsys)
        assert said.startswith(f"{damaged / WEIGHTS}: damaged adapter (") and "\n" not in said
        assert said.endswith("save or copy it again")
    assert no_model == []


def test_another_model_s_adapter_says_which_model_and_which_shapes_in_one_line(
        adapter: Path, options: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An adapter of a wider model (96 features where tiny has 64): torch would list each of its 16 factors."""
    other = _copy(adapter, tmp_path / "other")
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "SmolLM2-135M"}))
    wider = {key: torch.zeros((t.shape[0], 96) if ".lora_A." in key else (96, t.shape[1]))
             for key, t in load_file(str(adapter / WEIGHTS)).items()}
    save_file(wider, str(other / WEIGHTS), metadata={"format": "pt"})
    for argv in _verbs(other, options, tmp_path / "out"):
        assert main(argv) == 1
        assert _error(capsys) == (
            f"{other}: this adapter was made for SmolLM2-135M, not for the model 'tiny': 16 of its 16 LoRA factors "
            "differ in shape (e.g. model.layers.0.self_attn.k_proj.lora_A is [16, 96] where this model's layer needs "
            "[16, 64])")


def test_every_argument_is_checked_before_a_model_loads(adapter: Path, options: Path, tmp_path: Path,
                                                        no_model: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _, evaluate_argv = _verbs(adapter, options, tmp_path / "out")
    assert main([*evaluate_argv, "--conditions", "base,nope"]) == 2
    assert "--conditions: unknown condition 'nope': use base, adapters, baselines, routed, mixture or an adapter's " \
           "name (a)" in _error(capsys)
    no_options = [a for a in evaluate_argv if a not in ("--options", str(options))]
    assert main([*no_options, "--conditions", "routed"]) == 2
    assert "--conditions: the routed condition needs routing options" in _error(capsys)
    broken = tmp_path / "broken.rubric"
    broken.write_text("schema x {\n")
    assert main([*evaluate_argv[:evaluate_argv.index("--env") + 1], str(broken), "-o", str(tmp_path / "o")]) == 1
    assert _error(capsys).startswith(f"{broken}:1:10: error: unexpected end of file")
    route_argv, _ = _verbs(adapter, options, tmp_path / "out")
    task = route_argv.index("--task")
    assert main([*route_argv[:task], "--target", "capability", "--env", str(broken)]) == 1
    assert _error(capsys).startswith(f"{broken}:1:10: error: unexpected end of file")
    assert no_model == []


def test_route_and_evaluate_default_to_one_simulated_user_trace_s() -> None:
    defaults = []
    for verb in (route, evaluate):
        parser = argparse.ArgumentParser()
        verb.add_arguments(parser)
        defaults.append(parser.get_default("user"))
    assert defaults == [Tau2TargetSection().user, Tau2TargetSection().user] == ["base", "base"]


def test_a_run_folder_is_read_where_the_pipeline_s_layout_puts_its_files(adapter: Path, options: Path,
                                                                        tmp_path: Path) -> None:
    """`--run`: the model of its config, the adapters of train's and baselines' manifests (folders relative to the
    step's), the routing options and the retrieval index of route, all by `pipeline.layout`'s names."""
    from tracec.trace_rl.targeting.pipeline import layout

    run = tmp_path / "run"
    (run / layout.ROUTE).mkdir(parents=True)
    (run / layout.CONFIG).write_text('[model]\nname = "tiny"\n\n[routing]\nretrieval_k = 2\ntop_p = 0.5\n')
    for step, name in ((layout.TRAIN, "a"), (layout.BASELINES, "merge_linear")):
        (run / step / name).mkdir(parents=True)
        _copy(adapter, run / step / name / "adapter")
        (run / step / layout.ADAPTERS).write_text(json.dumps({name: {"adapter": f"{name}/adapter"}}))
    (run / layout.ROUTE / layout.OPTIONS).write_text(options.read_text())
    (run / layout.ROUTE / layout.INDEX).write_text('{"text": "book a room", "capabilities": ["a"]}\n')
    parser = argparse.ArgumentParser()
    evaluate.add_arguments(parser)
    args = parser.parse_args(["--run", str(run), "--target", "capability", "--env", str(ENV), "-o", str(tmp_path)])
    choice = evaluate.model_choice(args)
    assert choice.name == "tiny" and choice.adapters == {"a": run / layout.TRAIN / "a" / "adapter",
                                                         "merge_linear": run / layout.BASELINES / "merge_linear" /
                                                         "adapter"}
    assert [o.name for o in choice.options or []] == ["a", "base"]
    settings, index, path = evaluate.routing_from_args(args)
    assert (settings.top_p, settings.retrieval_k, path, len(index)) == (0.5, 2, run / layout.ROUTE / layout.INDEX, 1)
