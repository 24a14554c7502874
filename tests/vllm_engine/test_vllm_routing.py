"""TRACE's routed inference through vLLM's CPU engine: `tracec evaluate --engine vllm` routes each task by the base
model's label scores and decodes it under the routed adapter (a `LoRARequest` a request), against the peft engine
on the same adapters, tasks and settings (see test_vllm_cpu.py for the venv). Both run as a user runs them, in a
process each; and what vLLM cannot serve is said before its engine starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from numerics import forward_roundings, tolerance
from random_adapters import random_adapter
from tracec.trace_rl.policy.catalog import SMOLLM2
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.adapters import AdapterError
from tracec.trace_rl.targeting.evaluate import read_condition_trajectories, read_results
from tracec.trace_rl.targeting.peft_adapters import load_adapter_model
from tracec.trace_rl.targeting.routing import RouteOption, RoutingSettings, routing_messages

from tracec.config_io import ConfigError

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "examples" / "envs" / "tool_calling_precision.rubric"
CPU_MEMORY = 0.15  # evaluate.vllm_gpu_memory: on the CPU, the share of RAM vLLM reserves (test_vllm_cpu.py)
CONDITIONS = ("base", "alpha", "routed")
OPTIONS = [RouteOption(name="alpha", label="A", description="checks each tool's preconditions before calling it"),
           RouteOption(name="beta", label="B", description="calls tools with exact argument formats"),
           RouteOption(name="base", label="C", description="none of the above")]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The output folder of `tracec evaluate` on each engine, over the same two adapters, options and tasks."""
    root = tmp_path_factory.mktemp("routing")
    adapters = {name: random_adapter(root / name, seed, rank=8, alpha=16, model=SMOLLM2, scale=0.05)
                for name, seed in (("alpha", 1), ("beta", 2))}
    options = root / "options.json"
    options.write_text(json.dumps([o.__dict__ for o in OPTIONS]))
    outs = {}
    for engine in ("vllm", "transformers"):
        outs[engine] = root / engine
        command = [sys.executable, "-m", "tracec.cli", "evaluate", "--engine", engine, "--vllm-gpu-memory",
                   str(CPU_MEMORY), "--model", SMOLLM2, *(f"--adapter={n}={p}" for n, p in adapters.items()),
                   "--options", str(options), "--target", "capability", "--env", str(ENV),
                   "--conditions", ",".join(CONDITIONS), "--tasks", "1", "--max-turns", "2",
                   "--max-new-tokens", "24", "-o", str(outs[engine]), "--quiet"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False,
                              env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        assert done.returncode == 0, done.stderr[-3000:]
    return outs


def test_evaluate_through_vllm_decodes_each_task_as_the_peft_engine_does(evaluated: dict[str, Path]) -> None:
    """Greedy decoding under each condition's adapter gives the peft engine's replies, turn by turn: the LoRARequest
    reached the engine (the adapters' replies differ from the base model's) and meant the same weights."""
    actions: dict[str, dict[str, list[Any]]] = {}
    for engine, out in evaluated.items():
        actions[engine] = {c: [t["actions"] for t in read_condition_trajectories(out, c)] for c in CONDITIONS}
    assert actions["vllm"] == actions["transformers"]
    replies = actions["vllm"]
    assert replies["alpha"] != replies["base"]
    assert len(replies["base"]) == 1 and all(replies["base"])


def test_routing_through_vllm_scores_the_labels_as_peft_does(evaluated: dict[str, Path]) -> None:
    """Each task's route: the same choice on both engines, and the label scores' differences (vLLM's log-probs, peft's
    logits: one constant apart at a position) within the numerics rule of two fp32 forwards of the routing prompt."""
    routes = {engine: {r.seed: r.route for r in read_results(out / "results.jsonl") if r.condition == "routed"}
              for engine, out in evaluated.items()}
    assert set(routes["vllm"]) == set(routes["transformers"]) and len(routes["vllm"]) == 1
    base = Policy.load(SMOLLM2, LoraSection(rank=8, alpha=16), seed=0)
    for seed, route in routes["vllm"].items():
        other = routes["transformers"][seed]
        assert route is not None and other is not None and route["choice"] == other["choice"]
        ours, theirs = route["logits"], other["logits"]
        first = OPTIONS[0].name
        prompt = torch.as_tensor([_routing_prompt(base, seed)])
        with torch.no_grad():
            largest = float(base.model(input_ids=prompt).logits[0, -1].abs().max())
        assert route["prompt_tokens"] == prompt.shape[1]
        bound = 2 * tolerance(forward_roundings(base.model.config, prompt.shape[1]), largest, torch.float32)
        for option in OPTIONS[1:]:
            gap = (ours[option.name] - ours[first]) - (theirs[option.name] - theirs[first])
            assert abs(gap) <= bound, (seed, option.name, gap, bound)


def _routing_prompt(policy: Policy, seed: int) -> list[int]:
    """The routing prompt's token ids for the task `seed` of the evaluated environment, as the router renders it."""
    from tracec.trace_rl.llm import conversation
    from tracec.trace_rl.targeting.pipeline.config import TargetSection
    from tracec.trace_rl.targeting.pipeline.targets import target_domains

    domain, = target_domains(TargetSection(kind="capability", environments=(str(ENV),)), first_seed=seed, tasks=1)
    return conversation.encode(policy.tokenizer, routing_messages(domain.first_message(seed), OPTIONS,
                                                                  RoutingSettings()))


def test_what_vllm_cannot_serve_is_said_before_its_engine_starts(tmp_path: Path) -> None:
    """A model of an architecture vLLM does not implement, and a trained rank above what it serves: located errors
    naming the fix, from the checks that run before an engine is made."""
    from tracec.trace_rl.grpo.config import ModelSection, load_config
    from tracec.trace_rl.grpo.rollout_backend import require_backend
    from tracec.trace_rl.llm.calls import LLMError
    from tracec.trace_rl.policy.catalog import resolve_model
    from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config

    folder = tmp_path / "odd-model"
    folder.mkdir()
    for path in resolve_model(SMOLLM2).iterdir():
        (folder / path.name).symlink_to(path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(AdapterError, match=rf"{folder}/config.json: vLLM .* cannot load this model "
                                           r"\(NoSuchModelForCausalLM\); decode it with the transformers engine"):
        load_adapter_model(str(folder), {}, engine="vllm")
    pipeline = REPO / "examples" / "pipeline" / "cpu_smollm2.toml"
    with pytest.raises(ConfigError, match=r"train\.lora\.rank.*at most 512"):
        load_pipeline_config(pipeline, ["evaluate.engine=\"vllm\"", "train.lora.rank=1024"])
    trainer = load_config(REPO / "examples" / "train" / "tool_calling_trca.toml", ["rollout.backend=vllm"])
    with pytest.raises(ConfigError, match=r"lora\.rank.*at most 512"):
        require_backend(trainer.replace(lora=LoraSection(rank=1024)))
    with pytest.raises(ConfigError, match=r"model\.name.*tiny model exists only in code"):
        require_backend(trainer.replace(model=ModelSection(name="tiny")))
    with pytest.raises(LLMError, match=rf"{folder}/config.json: vLLM .* cannot load this model"):
        require_backend(trainer.replace(model=ModelSection(name=str(folder))))


def test_auto_rolls_out_with_vllm_on_a_gpu_where_it_is_installed() -> None:
    """`rollout.backend = "auto"` with vLLM installed: vLLM for a CUDA device's free-text turns; the KV-cache sampler
    on the CPU (measured faster there) and for admissible commands (which only it scores)."""
    from dataclasses import replace

    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.rollout_backend import resolved_backend

    config = load_config(None)
    on_gpu = config.replace(model=replace(config.model, device="cuda"))
    assert resolved_backend(config) == "transformers" and resolved_backend(on_gpu) == "vllm"
    admissible = on_gpu.replace(rollout=replace(on_gpu.rollout, action_mode="admissible"))
    assert resolved_backend(admissible) == "transformers"
