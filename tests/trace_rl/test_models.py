"""Finding models: checkpoint folders by path or name, the listing with parameter counts, and the SmolLM2 install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tracec.cli import main
from tracec.trace_rl.llm.local import TransformersBackend
from tracec.trace_rl.policy.catalog import SMOLLM2, ModelError, list_models, resolve_model
from tracec.trace_rl.policy.tiny import build_tiny_model
from tracec.trace_rl.policy.tiny_vocab import parameter_count


def _save_tiny(folder: Path, seed: int) -> int:
    model, tokenizer = build_tiny_model(seed, hidden=32, heads=2)
    TransformersBackend(model, tokenizer).save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def test_installed_models_are_listed_with_their_parameter_counts(tmp_path: Path) -> None:
    env = {"TRACEC_MODELS_DIR": str(tmp_path)}
    expected = {"alpha": _save_tiny(tmp_path / "alpha", 0), "beta": _save_tiny(tmp_path / "beta", 1)}
    (tmp_path / "not-a-model").mkdir()
    listed = {info.name: info for info in list_models(env)}
    assert set(listed) == {"tiny", "alpha", "beta"}
    assert {name: listed[name].parameters for name in expected} == expected
    assert listed["tiny"].path is None and listed["alpha"].path == tmp_path / "alpha"


def test_a_model_resolves_by_name_or_by_path(tmp_path: Path) -> None:
    env = {"TRACEC_MODELS_DIR": str(tmp_path / "models")}
    _save_tiny(tmp_path / "models" / "mine", 0)
    _save_tiny(tmp_path / "elsewhere", 0)
    assert resolve_model("mine", env) == tmp_path / "models" / "mine"
    assert resolve_model(tmp_path / "elsewhere", env) == tmp_path / "elsewhere"
    with pytest.raises(ModelError, match="installed: tiny, mine"):
        resolve_model("nonesuch", env)
    with pytest.raises(ModelError, match="make"):  # the default model, not installed here, says how to install it
        resolve_model(SMOLLM2, env)


def test_models_command_lists_and_fails_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRACEC_MODELS_DIR", str(tmp_path))
    _save_tiny(tmp_path / "alpha", 0)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and str(tmp_path / "alpha") in out


@pytest.mark.slow
def test_installed_smollm2_is_a_chat_model() -> None:
    """`make` installs SmolLM2 once; the folder loads as a Llama with its chat template and answers greedily."""
    folder = resolve_model(SMOLLM2)
    # a plain checkpoint: no GGUF quantization_config, which makes transformers' Trainer and TRL refuse to train it
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    backend = TransformersBackend.from_pretrained(folder)
    assert backend.uses_chat_template and backend.model.config.model_type == "llama"
    assert sum(p.numel() for p in backend.model.parameters()) == 134_515_008
    prompt = backend.prompt_ids([{"role": "user", "content": "What is the capital of France?"}])
    with torch.no_grad():
        out = backend.model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)
    assert "Paris" in backend.tokenizer.decode(out[0, len(prompt):])


@pytest.mark.parametrize("layers, hidden, heads", [(2, 64, 4), (3, 32, 2)])
def test_the_tiny_models_parameters_are_counted_without_building_it(layers: int, hidden: int, heads: int) -> None:
    model, _ = build_tiny_model(layers=layers, hidden=hidden, heads=heads)
    assert parameter_count(layers=layers, hidden=hidden) == sum(p.numel() for p in model.parameters())
